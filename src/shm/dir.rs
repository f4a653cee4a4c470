//! The directory: its lock, its identity, its segment files and their recovery.
//!
//! ```text
//!  DIR/LOCK                    flock(LOCK_EX|LOCK_NB) by the process using DIR; holds its pid
//!  DIR/IDENTITY                "baiji-shm-directory 1", the random id, the owner tag, a CRC
//!  DIR/NAME-SEQ.seg            a segment of log NAME (SEQ: 16 hex digits)
//!  DIR/NAME-SEQ.seg.tmp        a segment being made (renamed when its header is written)
//!  DIR/NAME-SEQ.seg.quarantine a segment recovery set aside (never read again)
//! ```

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc as StdArc, Mutex as StdMutex};
use std::time::Instant;

use crossbeam_epoch::Collector;
use memmap2::MmapOptions;

use super::layout::{
    name_bytes, HeaderFault, SegmentHeader, FORMAT_VERSION, MAX_NAME, SEGMENT_HEADER,
};
use super::log::{validate, Recovery, Source};
use super::memory::Memory;
use super::recover::visit_segment;
use super::segment::{SegPtr, Segment, Shared, REFERENCE};
use super::{Log, LogConfig, Quarantined, Reclaim, Recovered, RecoveryReport, SegmentError};
use crate::sync::{lock, Arc};

const LOCK_FILE: &str = "LOCK";
const IDENTITY_FILE: &str = "IDENTITY";
const IDENTITY_MAGIC: &str = "baiji-shm-directory 1";
const MAX_OWNER: usize = 200;

fn io(path: &Path, source: std::io::Error) -> SegmentError {
    SegmentError::Io { path: path.to_path_buf(), source }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Who a directory belongs to: a random id made when it was initialised, and the owner tag
/// its first opener gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The directory's random id (mixed into every record's checksum).
    pub id: [u8; 16],
    /// The owner tag (e.g. `cluster/broker`).
    pub owner: String,
}

impl Identity {
    fn encode(&self) -> String {
        let body = format!("{IDENTITY_MAGIC}\nid {}\nowner {}\n", hex(&self.id), self.owner);
        format!("{body}crc {:08x}\n", crc32fast::hash(body.as_bytes()))
    }

    fn decode(text: &str) -> Result<Identity, String> {
        let Some(split) = text.rfind("crc ") else { return Err("no checksum line".into()) };
        let (body, crc) = text.split_at(split);
        let crc = u32::from_str_radix(crc.trim_start_matches("crc ").trim(), 16)
            .map_err(|_| "unreadable checksum".to_string())?;
        if crc32fast::hash(body.as_bytes()) != crc {
            return Err("checksum mismatch (the file was edited or torn)".into());
        }
        let mut lines = body.lines();
        let magic = lines.next().unwrap_or_default();
        if magic != IDENTITY_MAGIC {
            return Err(format!("unknown format {magic:?} (this build reads {IDENTITY_MAGIC:?})"));
        }
        let id_hex = lines.next().and_then(|l| l.strip_prefix("id ")).unwrap_or_default();
        let mut id = [0u8; 16];
        if id_hex.len() != 32 || !id_hex.is_ascii() {
            return Err("malformed id".into());
        }
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(&id_hex[2 * i..2 * i + 2], 16)
                .map_err(|_| "malformed id".to_string())?;
        }
        let owner = lines.next().and_then(|l| l.strip_prefix("owner ")).unwrap_or_default();
        Ok(Identity { id, owner: owner.to_string() })
    }
}

/// A directory of segment logs, opened by one process at a time. See the [module docs](super).
#[derive(Debug)]
pub struct Directory {
    inner: StdArc<DirInner>,
}

#[derive(Debug)]
pub(crate) struct DirInner {
    path: PathBuf,
    identity: Identity,
    /// Holds the flock for as long as the directory or any of its logs lives.
    _lock: File,
    open: StdMutex<HashSet<String>>,
}

/// The segment files of one log (a log's [`Source`]).
#[derive(Debug)]
pub(crate) struct Files {
    dir: StdArc<DirInner>,
    name: String,
}

impl Drop for Files {
    fn drop(&mut self) {
        lock(&self.dir.open).remove(&self.name);
    }
}

impl Files {
    fn path_of(&self, seq: u64) -> PathBuf {
        self.dir.path.join(format!("{}-{seq:016x}.seg", self.name))
    }

    /// Makes segment `seq`: a `.tmp` file of the full size (allocated now, so that a full
    /// tmpfs is this error rather than a SIGBUS on a later write), mapped, headed, renamed.
    pub(crate) fn create(
        &self,
        seq: u64,
        config: &LogConfig,
        shared: &Arc<Shared>,
    ) -> Result<SegPtr, SegmentError> {
        let path = self.path_of(seq);
        let tmp = path.with_extension("seg.tmp");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| io(&tmp, e))?;
        let made = (|| {
            allocate(&file, config.segment_size)?;
            let mut opts = MmapOptions::new();
            opts.len(config.segment_size);
            if config.populate {
                opts.populate();
            }
            opts.map_raw(&file)
        })();
        let map = match made {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(io(&tmp, e));
            }
        };
        let mem = Memory::Mapped(map);
        let header = SegmentHeader {
            version: FORMAT_VERSION,
            id: self.dir.identity.id,
            seq,
            size: config.segment_size as u64,
            name: name_bytes(&self.name),
        };
        // SAFETY: nobody else sees this mapping yet.
        unsafe { mem.write(0, &[&header.encode()]) };
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(&path, e));
        }
        Ok(Segment::create(mem, seq, shared, Some(path), REFERENCE))
    }
}

/// Reserves the file's blocks (tmpfs pages) now; where the filesystem cannot, just sizes it.
fn allocate(file: &File, size: usize) -> std::io::Result<()> {
    // SAFETY: `fallocate` on a valid, open descriptor, with no pointer arguments.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => file.set_len(size as u64),
        _ => Err(e),
    }
}

/// Gives the pages of a recovered segment's unused tail (`from..size`, only zeros: recovered
/// segments take no more records) back to the system, keeping the file's size. Best effort: a
/// filesystem that cannot punch holes keeps them.
fn punch_tail(path: &Path, from: usize, size: usize) {
    let from = from.next_multiple_of(4096);
    if from >= size {
        return;
    }
    let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) else { return };
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: `fallocate` on a valid, open descriptor, with no pointer arguments.
    let _ = unsafe {
        libc::fallocate(file.as_raw_fd(), mode, from as libc::off_t, (size - from) as libc::off_t)
    };
}

fn valid_owner(owner: &str) -> bool {
    !owner.is_empty()
        && owner.len() <= MAX_OWNER
        && owner.bytes().all(|b| (0x20..0x7f).contains(&b))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn random_id() -> std::io::Result<[u8; 16]> {
    let mut id = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut id)?;
    Ok(id)
}

/// Takes the directory's lock and writes our pid into it.
fn take_lock(dir: &Path) -> Result<File, SegmentError> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| io(&path, e))?;
    // SAFETY: `flock` on a valid, open descriptor, with no pointer arguments.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(SegmentError::Locked {
                path: dir.to_path_buf(),
                pid: text.trim().parse().ok(),
            });
        }
        return Err(io(&path, e));
    }
    let written = (|| {
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        writeln!(file, "{}", std::process::id())
    })();
    written.map_err(|e| io(&path, e))?;
    Ok(file)
}

/// Reads the directory's identity, or makes it if the directory is new.
fn identity(dir: &Path, owner: &str) -> Result<Identity, SegmentError> {
    let path = dir.join(IDENTITY_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| SegmentError::BadIdentity {
                path: path.clone(),
                reason: "not text".into(),
            })?;
            let id = Identity::decode(&text)
                .map_err(|reason| SegmentError::BadIdentity { path: path.clone(), reason })?;
            if id.owner != owner {
                return Err(SegmentError::ForeignOwner {
                    path: dir.to_path_buf(),
                    found: id.owner,
                    expected: owner.to_string(),
                });
            }
            Ok(id)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = Identity {
                id: random_id().map_err(|e| io(Path::new("/dev/urandom"), e))?,
                owner: owner.to_string(),
            };
            let tmp = dir.join("IDENTITY.tmp");
            std::fs::write(&tmp, id.encode()).map_err(|e| io(&tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
            Ok(id)
        }
        Err(e) => Err(io(&path, e)),
    }
}

impl Directory {
    /// Opens (creating it if needed) the directory at `path` for `owner`, taking its lock.
    ///
    /// # Errors
    /// [`SegmentError::Locked`] (with the holder's pid) if another process, or another
    /// `Directory` of this one, has it open; [`SegmentError::ForeignOwner`] if it was
    /// initialised for another owner; [`SegmentError::BadIdentity`] if its identity file is
    /// damaged or of an unknown format; [`SegmentError::InvalidOwner`]; [`SegmentError::Io`].
    pub fn open(path: impl AsRef<Path>, owner: &str) -> Result<Directory, SegmentError> {
        let path = path.as_ref().to_path_buf();
        if !valid_owner(owner) {
            return Err(SegmentError::InvalidOwner(owner.to_string()));
        }
        std::fs::create_dir_all(&path).map_err(|e| io(&path, e))?;
        let lock_file = take_lock(&path)?;
        let identity = identity(&path, owner)?;
        Ok(Directory {
            inner: StdArc::new(DirInner {
                path,
                identity,
                _lock: lock_file,
                open: StdMutex::new(HashSet::new()),
            }),
        })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Its identity.
    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// Opens log `name` (`[a-z0-9_]{1,16}`): recovers its segments, calling `visit` for every
    /// record found, in (segment, position) order, then starts appending to a new segment.
    /// `collector` is the epoch collector whose guards [`Log::append`] will take (the
    /// engine's).
    ///
    /// A [`Recovered::Record`]'s payload keeps its segment; dropping it during `visit` (or
    /// later) says the record is dead in a [`Reclaim::WhenUnreferenced`] log. A segment file
    /// that is not a valid segment of this log in this directory is renamed `*.quarantine` and
    /// listed in the report; the log opens with the rest.
    ///
    /// # Errors
    /// [`SegmentError::InvalidName`], [`SegmentError::InvalidConfig`],
    /// [`SegmentError::AlreadyOpen`], [`SegmentError::Io`] (listing the directory, making the
    /// first segment).
    pub fn open_log(
        &self,
        name: &str,
        config: LogConfig,
        collector: Collector,
        mut visit: impl FnMut(Recovered),
    ) -> Result<(Log, RecoveryReport), SegmentError> {
        if !valid_name(name) {
            return Err(SegmentError::InvalidName(name.to_string()));
        }
        validate(&config)?;
        if !lock(&self.inner.open).insert(name.to_string()) {
            return Err(SegmentError::AlreadyOpen(name.to_string()));
        }
        let files = Files { dir: StdArc::clone(&self.inner), name: name.to_string() };
        let started = Instant::now();
        let shared = Shared::new(self.inner.identity.id);
        let mut report = RecoveryReport::default();
        let mut segments = Vec::new();
        let mut max_seq = 0;
        for (seq, path) in self.list(name, &mut report)? {
            max_seq = max_seq.max(seq);
            match self.open_segment(&path, name, seq, &config, &shared) {
                Err(reason) => report.quarantined.push(quarantine(&path, reason)),
                Ok(seg) => {
                    // SAFETY: recovery runs before any writer exists.
                    let s = unsafe { seg.get() };
                    // SAFETY: no writer exists yet (the log is not started).
                    let t = unsafe { visit_segment(s, true, &mut visit) };
                    report.records += t.records;
                    report.torn_records += t.torn;
                    report.corrupt_records += t.corrupt;
                    report.torn_regions += t.regions;
                    if t.is_empty() {
                        // An empty segment (a spare nobody used): its release below removes it.
                        report.removed_files += 1;
                        s.release();
                        continue;
                    }
                    report.segments += 1;
                    // A segment the last run was filling when it stopped is mostly free space,
                    // reserved (allocated) when it was made: give that back.
                    punch_tail(&path, t.used_end, s.size());
                    segments.push(seg);
                }
            }
        }
        let held = match config.reclaim {
            Reclaim::OnTruncate => segments,
            Reclaim::WhenUnreferenced => {
                for seg in segments {
                    // SAFETY: the log's hold on a recovered segment, given back once: no writer
                    // ever sees a recovered segment, so no epoch is needed.
                    unsafe { seg.get() }.release();
                }
                Vec::new()
            }
        };
        report.elapsed = started.elapsed();
        let recovery = Recovery {
            records: report.records,
            torn: report.torn_records + report.corrupt_records,
            regions: report.torn_regions,
            quarantined: report.quarantined.len() as u64,
            elapsed: report.elapsed,
        };
        // Segments whose records `visit` dropped, and empty ones, go now.
        shared.free_retired();
        let log = Log::start(
            shared,
            collector,
            config,
            Source::Files(files),
            max_seq + 1,
            held,
            recovery,
        )?;
        Ok((log, report))
    }

    /// The log's segment files by sequence; removes leftovers of interrupted creations.
    fn list(
        &self,
        name: &str,
        report: &mut RecoveryReport,
    ) -> Result<Vec<(u64, PathBuf)>, SegmentError> {
        let dir = &self.inner.path;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let entry = entry.map_err(|e| io(dir, e))?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else { continue };
            let Some(rest) = file_name.strip_prefix(name).and_then(|r| r.strip_prefix('-')) else {
                continue;
            };
            let (seq_hex, ext) = rest.split_at(rest.find('.').unwrap_or(rest.len()));
            let Ok(seq) = u64::from_str_radix(seq_hex, 16) else { continue };
            if seq_hex.len() != 16 {
                continue;
            }
            match ext {
                ".seg" => found.push((seq, entry.path())),
                ".seg.tmp" if std::fs::remove_file(entry.path()).is_ok() => {
                    report.removed_files += 1
                }
                _ => {}
            }
        }
        found.sort();
        Ok(found)
    }

    /// Opens and checks one segment file; `Err` is the reason to quarantine it.
    fn open_segment(
        &self,
        path: &Path,
        name: &str,
        seq: u64,
        config: &LogConfig,
        shared: &Arc<Shared>,
    ) -> Result<SegPtr, String> {
        let file = File::open(path).map_err(|e| format!("cannot open it: {e}"))?;
        let len = file.metadata().map_err(|e| format!("cannot read its size: {e}"))?.len();
        if len < SEGMENT_HEADER as u64 {
            return Err(format!("truncated: {len} bytes, shorter than a segment header"));
        }
        let mut raw = [0u8; SEGMENT_HEADER];
        file.read_exact_at(&mut raw, 0).map_err(|e| format!("cannot read its header: {e}"))?;
        let h = SegmentHeader::decode(&raw).map_err(|f| match f {
            HeaderFault::Magic => {
                "not a baiji segment: no magic (overwritten, or another program's file)".to_string()
            }
            HeaderFault::Checksum => {
                "its header's checksum does not match (overwritten or torn)".to_string()
            }
            HeaderFault::Version(v) => {
                format!("segment format version {v}; this build reads version {FORMAT_VERSION}")
            }
        })?;
        if h.id != self.inner.identity.id {
            return Err(format!(
                "it belongs to directory {}, not to this one ({}): copied from another broker?",
                hex(&h.id),
                hex(&self.inner.identity.id)
            ));
        }
        if h.name != name_bytes(name) || h.seq != seq {
            return Err(format!(
                "its header names log {:?} segment {}, its file name log {name:?} segment {seq}",
                String::from_utf8_lossy(&h.name).trim_end_matches('\0'),
                h.seq
            ));
        }
        if h.size != len {
            let what = if len < h.size { "truncated" } else { "extended" };
            return Err(format!("{what}: {len} bytes, its header says {}", h.size));
        }
        if h.size % 8 != 0 || h.size > 1 << 30 || h.size < SEGMENT_HEADER as u64 + 64 {
            return Err(format!("implausible size {} in its header", h.size));
        }
        let mut opts = MmapOptions::new();
        opts.len(h.size as usize);
        if config.populate {
            opts.populate();
        }
        // Read-only: a recovered segment takes no record, so nothing may write into it.
        let map = opts.map_raw_read_only(&file).map_err(|e| format!("cannot map it: {e}"))?;
        Ok(Segment::create(
            Memory::Mapped(map),
            seq,
            shared,
            Some(path.to_path_buf()),
            Segment::sealed_cursor(1, h.size as usize),
        ))
    }
}

/// Renames `path` to `*.quarantine` (never overwriting an earlier one).
fn quarantine(path: &Path, reason: String) -> Quarantined {
    let base = path.as_os_str().to_string_lossy().into_owned();
    for n in 0..100 {
        let target =
            if n == 0 { format!("{base}.quarantine") } else { format!("{base}.{n}.quarantine") };
        let target = PathBuf::from(target);
        if target.exists() {
            continue;
        }
        return match std::fs::rename(path, &target) {
            Ok(()) => Quarantined { file: target, reason },
            Err(e) => Quarantined {
                file: path.to_path_buf(),
                reason: format!("{reason} (not renamed: {e})"),
            },
        };
    }
    Quarantined {
        file: path.to_path_buf(),
        reason: format!("{reason} (not renamed: 100 quarantined copies exist)"),
    }
}
