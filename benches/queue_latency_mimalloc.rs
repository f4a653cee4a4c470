//! `queue_latency` again, with mimalloc as the global allocator.
//!
//! Why a second bench target rather than a cargo feature or an environment variable: the global
//! allocator is fixed at link time, so one binary cannot run both; a second target runs the very
//! same source (`queue_latency.rs`, included as a module) in the same `cargo bench`
//! invocation, without touching the library's `[features]` or `[dependencies]` (mimalloc is a
//! dev-dependency only). The printed tables are headed `mimalloc`.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "queue_latency.rs"]
mod body;

fn main() {
    body::ALLOCATOR.set("mimalloc").expect("the allocator name is set once");
    body::main();
}
