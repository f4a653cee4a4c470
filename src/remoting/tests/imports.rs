//! No import circles between the files of `remoting` (review of e77444b, circle 3:
//! `command.rs` defined the types the header codecs use while calling those codecs).
//!
//! The check reads the sources: every `crate::remoting::…` and `super::…` path outside the test
//! files is an arrow from the file that names it to the file of the module it names (the
//! longest prefix that is a file; `remoting::X` re-exports are followed to their module), and a
//! folder's `mod.rs` points at every child it declares. An arrow from a file to one of its
//! ancestors (a child using its folder's `mod.rs`) is the module tree itself and is not counted.

use std::collections::BTreeMap;
use std::path::Path;

type Module = Vec<String>;

/// Every non-test `.rs` file under `dir`, by module path (`foo/mod.rs` and `foo.rs` are `foo`).
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<Module, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                let mut sub = prefix.to_vec();
                sub.push(name);
                modules(&path, &sub, out);
            }
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if stem == "tests" {
                continue;
            }
            let mut module = prefix.to_vec();
            if stem != "mod" {
                module.push(stem.to_owned());
            }
            out.insert(module, std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
}

/// The text without comments (doc links name paths that are no imports).
fn code_of(text: &str) -> String {
    text.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// The module paths a path starting at `rest` names: `a::b::c`, or `a::{b, c::d}` (one level
/// of braces), as segments.
fn paths_at(rest: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut head = Vec::new();
    let mut at = rest;
    loop {
        let len = at.find(|c: char| !ident(c)).unwrap_or(at.len());
        if len == 0 {
            break;
        }
        head.push(at[..len].to_owned());
        at = &at[len..];
        match at.strip_prefix("::") {
            Some(next) => at = next,
            None => return vec![head],
        }
    }
    let Some(group) = at.strip_prefix('{') else { return vec![head] };
    let inner = &group[..group.find('}').unwrap_or(group.len())];
    inner
        .split(',')
        .map(|item| {
            let mut path = head.clone();
            path.extend(
                item.trim()
                    .split("::")
                    .take_while(|s| !s.is_empty() && s.chars().all(ident) && *s != "self")
                    .map(str::to_owned),
            );
            path
        })
        .collect()
}

/// The arrows out of each file, as described in the module docs.
fn arrows(files: &BTreeMap<Module, String>) -> BTreeMap<Module, Vec<Module>> {
    let mut reexports: BTreeMap<String, String> = BTreeMap::new();
    for line in code_of(files.get(&Vec::new()).map_or("", String::as_str)).lines() {
        if let Some(rest) = line.trim().strip_prefix("pub use ") {
            for path in paths_at(rest) {
                if let (Some(module), Some(name)) = (path.first(), path.last()) {
                    reexports.insert(name.clone(), module.clone());
                }
            }
        }
    }
    let resolve = |mut path: Vec<String>| -> Module {
        if let Some(module) = path.first().and_then(|first| reexports.get(first)) {
            path.insert(0, module.clone());
        }
        while !path.is_empty() && !files.contains_key(&path) {
            path.pop();
        }
        path
    };
    let mut out = BTreeMap::new();
    for (module, text) in files {
        let code = code_of(text);
        let mut targets = Vec::new();
        for (at, _) in code.match_indices("crate::remoting::") {
            for path in paths_at(&code[at + "crate::remoting::".len()..]) {
                targets.push(resolve(path));
            }
        }
        for (at, _) in code.match_indices("super::") {
            if code[..at].ends_with("super::")
                || code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            {
                continue;
            }
            let mut rest = &code[at..];
            let mut base = module.clone();
            while let Some(next) = rest.strip_prefix("super::") {
                base.pop();
                rest = next;
            }
            for path in paths_at(rest) {
                targets.push(resolve(base.iter().cloned().chain(path).collect()));
            }
        }
        targets.retain(|t| !module.starts_with(t));
        // A folder's `mod.rs` declares (and usually calls) its children.
        targets.extend(
            files.keys().filter(|k| k.len() == module.len() + 1 && k.starts_with(module)).cloned(),
        );
        targets.sort();
        targets.dedup();
        out.insert(module.clone(), targets);
    }
    out
}

/// A circle through `from`, if the arrows make one.
fn circle(arrows: &BTreeMap<Module, Vec<Module>>, from: &Module) -> Option<Vec<Module>> {
    fn walk(
        arrows: &BTreeMap<Module, Vec<Module>>,
        start: &Module,
        path: &mut Vec<Module>,
        seen: &mut Vec<Module>,
    ) -> bool {
        let Some(last) = path.last().cloned() else { return false };
        for next in arrows.get(&last).into_iter().flatten() {
            if next == start {
                return true;
            }
            if !seen.contains(next) {
                seen.push(next.clone());
                path.push(next.clone());
                if walk(arrows, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![from.clone()];
    walk(arrows, from, &mut path, &mut Vec::new()).then_some(path)
}

#[test]
fn given_the_remoting_sources_should_find_no_import_circle_between_files() {
    let mut files = BTreeMap::new();
    modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/remoting"), &[], &mut files);
    assert!(files.len() > 30, "the sources were found: {} files", files.len());
    let arrows = arrows(&files);
    let command = vec!["command".to_owned()];
    assert!(
        arrows.get(&command).is_some_and(|t| t.contains(&vec!["header_codec".to_owned()])),
        "the check sees command.rs calling the codecs: {:?}",
        arrows.get(&command)
    );
    for module in files.keys() {
        let found = circle(&arrows, module).map(|c| c.iter().map(|m| m.join("/")).collect());
        assert_eq!(found, None::<Vec<String>>, "an import circle through {}", module.join("/"));
    }
}
