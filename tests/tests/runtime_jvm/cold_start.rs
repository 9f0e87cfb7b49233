//! 0. A cold start under load.

use tests::{
    jvm::{self, JvmGateway},
    jvm_scenario::cold_start_is_quiet,
    privileged, serial,
};

use crate::netty_gateway;

/// The observer watches the gateway from its first request and the load starts cold, with no
/// warm-up: class loading, the interpreter and the JIT's first compilations run in the loop
/// threads, with young GCs and safepoints all the while. A cold start is not an incident:
/// nothing may fire.
#[test]
fn jvm_netty_cold_start_under_load_is_quiet() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let Some((redis, gateway)) = netty_gateway() else { return };
    cold_start_is_quiet("jvm netty", &gateway, 16);
    drop(redis);
}

/// The same for the JDK's HttpServer serving on its dispatcher thread, which once ran a 180 ms
/// iteration while cold: one long iteration is a metric, not an incident.
#[test]
#[ignore = "a variant of a scenario CI runs (one per detector and runtime family); runs in `cargo xtask bench detect`"]
fn jvm_httpserver_cold_start_under_load_is_quiet() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let gateway = JvmGateway::start("JdkHttpGateway", &["inline"], &["-Xmx256m"]);
    cold_start_is_quiet("jvm httpserver", &gateway, 8);
}
