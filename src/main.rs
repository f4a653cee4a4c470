//! The baiji command line (filled in by the broker issue).

fn main() {
    eprintln!("baiji: the broker is not built yet; see README.md");
}
