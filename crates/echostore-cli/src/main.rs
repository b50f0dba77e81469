//! The `echostore` command (in progress).

fn main() {}
