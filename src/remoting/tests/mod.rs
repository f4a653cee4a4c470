//! The suites that test `remoting` as a whole, one file each:
//!
//! | suite | what it checks |
//! |---|---|
//! | [`bounds`] | decoding cost (allocation, key comparisons) is linear in any adversarial header |
//! | [`fuzz`] | nothing derived from peer bytes panics or over-allocates; encoders round-trip |
//! | [`imports`] | no import circle between the files of `remoting` |
//! | [`scenario`] | client bytes in, broker bytes out, against a strict model of the Rust client |
//!
//! Tests of one module are that module's child `tests` (`foo.rs` → `foo/tests.rs`, the layout
//! of Rust's standard library), so a file holds code only and its tests sit one folder down.

mod bounds;
mod fuzz;
mod imports;
mod scenario;
