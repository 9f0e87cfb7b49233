//! `cargo xtask bench parser`: the HTTP/1.x parser's CPU cost per segment, in process and
//! unprivileged (gateway-observer-http/examples/parser_bench.rs, built with the release profile).
//! `cargo xtask bench records`: the daemon's work per proxied request on the socket ring, the
//! parser included (gateway-observer/examples/records_bench.rs).

use anyhow::Context as _;

use crate::util::cargo;

pub fn run() -> anyhow::Result<()> {
    cargo(&["run", "--release", "-p", "gateway-observer-http", "--example", "parser_bench"])
        .context("the parser benchmark failed")
}

pub fn records() -> anyhow::Result<()> {
    cargo(&["run", "--release", "-p", "gateway-observer", "--example", "records_bench"])
        .context("the socket records benchmark failed")
}
