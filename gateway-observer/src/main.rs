use std::process::ExitCode;

use clap::Parser as _;
use gateway_observer::{
    cli::{Cli, Command, calibrate::calibrate as check_calibrate, check, run},
    logging, report, top,
};

fn main() -> ExitCode {
    gateway_observer::heap::pin_thresholds();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            let _ = err.print(); // --help, --version
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            // One line, not clap's usage block: the message names the flag and the problem.
            let text = err.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            report!("gateway-observer: {first}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Calibrate { duration } => match check_calibrate(duration) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                report!("gateway-observer: {err:#}");
                ExitCode::FAILURE
            }
        },
        Command::Top(args) => {
            let result =
                if args.once { top::once(&args.connect, args.format) } else { top::run(&args.connect, args.interval) };
            match result {
                Ok(()) => ExitCode::SUCCESS,
                // Nobody is left to read a message.
                Err(top::TopError::TerminalGone) => ExitCode::FAILURE,
                Err(err) => {
                    report!("gateway-observer top: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Check => {
            if check::check() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Run(args) => {
            logging::init(args.log_format);
            let config = match run::effective_config(&args) {
                Ok(config) => config,
                Err(err) => return fail(&err),
            };
            run::set_nice(config.nice);
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(err) => {
                    tracing::error!("cannot start the async runtime: {err}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(run::run(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => fail(&err),
            }
        }
    }
}

/// The daemon's last line, through its log (its format and destination).
fn fail(err: &run::RunError) -> ExitCode {
    match err {
        run::RunError::Usage(message) => {
            tracing::error!("{message}");
            ExitCode::from(2)
        }
        run::RunError::Other(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}
