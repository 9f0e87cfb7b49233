//! Writes the man pages of the daemon's CLI, one per visible subcommand
//! (`gateway-observer.1`, `gateway-observer-run.1`, ...), into the directory given as the only
//! argument: `cargo xtask package` runs it. An example rather than a subcommand, so the shipped
//! binary carries no man-page generator.

use clap::CommandFactory as _;
use gateway_observer::cli::Cli;

fn main() -> std::io::Result<()> {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: man_pages OUT_DIR");
        std::process::exit(2);
    };
    clap_mangen::generate_to(Cli::command(), &dir)
}
