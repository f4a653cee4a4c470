//! Empty: this package only exists for its dependency on baiji with the `cli` feature (see
//! its Cargo.toml).
