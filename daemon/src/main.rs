//! gixd — a git server on gitoxide. This is the placeholder entry point; the server lands with
//! the upload-pack issue.

use clap::Parser;

/// A git server on gitoxide.
#[derive(Parser)]
#[command(name = "gixd", version)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
