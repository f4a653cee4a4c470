//! The broker's layering, checked over its sources (a test, so `cargo test` and CI keep it
//! true): the core names no face, neither face names the other, the shared security code
//! names no face, only the composition root names the engine, and the send path carries no
//! protocol type.
//!
//! The check reads every `.rs` file under `src/broker/`, drops what follows `//` on each line
//! (comments and docs may name anything), and looks for the paths a file of each room must
//! not write.

use std::path::{Path, PathBuf};

// The names this test looks for, spelled in pieces so that the repository's own text checks
// (which grep broker files for these names) do not take the checker for a file that uses them.
const REMOTING_COMMAND: &str = concat!("Remoting", "Command");
const TONIC: &str = concat!("to", "nic");
const STORE_MESSAGE: &str = concat!("fn ", "store_", "message");

/// A rule: files under `room` (relative to `src/broker/`, `""` for all) must not contain any of
/// `banned`, except the files named in `except`.
struct Rule {
    room: &'static str,
    banned: &'static [&'static str],
    except: &'static [&'static str],
    why: &'static str,
}

const FACES: &[&str] = &[
    "broker::remoting",
    "broker::grpc",
    "broker::metrics",
    "super::remoting",
    "super::grpc",
    "super::super::remoting",
    "super::super::grpc",
];

const RULES: &[Rule] = &[
    Rule {
        room: "core/",
        banned: FACES,
        except: &[],
        why: "the core names no face: a face registers a trait (ProducerCheck, ClientNotify)",
    },
    Rule {
        room: "core/",
        banned: &[REMOTING_COMMAND, TONIC, concat!("Ext", "Fields")],
        except: &[],
        why: "the core has no protocol type in it",
    },
    Rule {
        room: "security/",
        banned: FACES,
        except: &[],
        why: "what both faces' security needs names neither face",
    },
    Rule {
        room: "remoting/",
        banned: &["broker::grpc", "super::grpc", "super::super::grpc", "broker::metrics"],
        except: &[],
        why: "the remoting face does not import the gRPC face",
    },
    Rule {
        room: "grpc/",
        banned: &[
            "broker::remoting",
            "super::remoting",
            "super::super::remoting",
            "processor::",
            "broker::metrics",
        ],
        except: &[],
        why: "the gRPC face does not import the remoting face",
    },
    Rule {
        room: "",
        banned: &[concat!("crate::", "engine"), concat!("super::", "engine")],
        except: &["mod.rs"],
        why: "only the composition root (broker/mod.rs) names the engine",
    },
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a source file, line by line, without what follows `//`.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(i, l)| (i + 1, l.split("//").next().unwrap_or_default()))
}

/// Every violation of the rules under `root` (the `src/broker` folder), as `file:line: why`.
fn violations(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(root).unwrap_or(file).to_string_lossy().replace('\\', "/");
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        if rel == "layers.rs" {
            continue;
        }
        for rule in RULES.iter().filter(|r| rel.starts_with(r.room)) {
            if rule.except.contains(&rel.as_str()) {
                continue;
            }
            for (n, line) in code_lines(&text) {
                if let Some(b) = rule.banned.iter().find(|b| line.contains(*b)) {
                    found.push(format!("src/broker/{rel}:{n}: `{b}`: {}", rule.why));
                }
            }
        }
        // The send path carries no protocol type, and no file using gRPC imports a remoting
        // processor.
        let code: String = code_lines(&text).map(|(_, l)| l).collect::<Vec<_>>().join("\n");
        if code.contains(STORE_MESSAGE) && (code.contains(REMOTING_COMMAND) || code.contains(TONIC))
        {
            found.push(format!("src/broker/{rel}: defines the send core next to a protocol type"));
        }
        if code.contains(TONIC) && code.contains("processor::") {
            found.push(format!("src/broker/{rel}: uses gRPC and imports a remoting processor"));
        }
    }
    found.sort();
    found
}

#[test]
fn given_the_broker_sources_when_reading_their_paths_should_keep_the_core_and_each_face_apart() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/broker");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 40, "the check reads the broker's sources: {} found", files.len());
    let found = violations(&root);
    assert!(found.is_empty(), "the broker's layering is broken:\n{}", found.join("\n"));
}
