//! What a web server the observer does not target pays: the bench's upstream nginx (a static
//! 200) driven straight by wrk's closed loop, without and with the daemon attached to an idle
//! process, in pairs with the order swapped. Every socket call on the host runs the socket
//! tracepoints' programs, and every packet of data `sk_data_ready`'s, targeted or not: the on
//! phase's costed run says what they take per request of a process nobody targets. Issue 14
//! asks nothing of the host's other processes: the server is held to what a target keeps.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Result;

use super::Options;
use super::report::{Report, Unit};
use super::saturation::{self, GOAL_THROUGHPUT_KEPT, Phase, Target};
use crate::bench_gateway::{Procs, Proxies};

const NAME: &str = "untargeted nginx";

pub(super) fn pairs(
    opts: &Options,
    proxies: &Proxies,
    observer: &Path,
    dir: &Path,
    procs: &mut Procs,
) -> Result<Vec<(Phase, Phase)>> {
    let idle = procs.spawn("sleep", Command::new("sleep").arg("3600").stdout(Stdio::null()))?;
    println!("\n(the observer targets an idle sleep, pid {idle}; the server below is not a target)");
    let target = Target {
        name: NAME,
        pid: proxies.upstream_pid,
        port: proxies.upstream_port,
        observed: idle,
        tls: false,
        h2c_streams: None,
        observer_args: &[],
        dir,
    };
    saturation::pairs(opts, &target, observer, procs)
}

pub(super) fn add_rows(report: &mut Report, pairs: &[(Phase, Phase)]) {
    saturation::add_judged_ratios(report, NAME, GOAL_THROUGHPUT_KEPT, pairs);
    let kernel = pairs.iter().filter_map(|(_, on)| on.observer.map(|(kernel, ..)| kernel)).collect();
    report.cost(format!("{NAME} CPU/request: kernel programs"), kernel, Unit::Ns, None);
    let added = pairs.iter().map(|(off, on)| on.gateway_ns - off.gateway_ns).collect();
    report.cost(format!("{NAME} CPU/request: added in the server"), added, Unit::Ns, None);
    report.figure(format!("{NAME} off: req/s"), pairs.iter().map(|(off, _)| off.wrk.rps).collect(), Unit::Rps);
    report.figure(
        format!("{NAME} off: server CPU/request"),
        pairs.iter().map(|(off, _)| off.gateway_ns).collect(),
        Unit::Ns,
    );
}
