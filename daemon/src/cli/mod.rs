//! The command line's commands, one module per concern, each taking its parsed arguments:
//! serving and its configuration ([`serve`]: `serve`, `daemon`, `shell`, `budget`,
//! `check-config`), access ([`access`]: tokens, SSH keys, the host key) and repositories
//! ([`repos`]: `repo`, `maintenance`). `main.rs` lists the commands and dispatches to these.

pub mod access;
pub mod mirror;
pub mod repos;
pub mod serve;
