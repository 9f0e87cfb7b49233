//! The files in deploy/ against the daemon they deploy. The systemd unit and the DaemonSet start
//! it with a command line its own CLI accepts and a config it loads; the alert rules pass
//! promtool's check and their unit tests; the dashboard's queries parse. And every
//! `gateway_observer_` metric and label that the rules, their tests and the dashboard name is one
//! the daemon exports: checked against a real scrape of the daemon, started with the example
//! config, watching the reference gateway after a little traffic.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::Command,
    time::Duration,
};

use clap::Parser as _;
use gateway_observer::{
    alerts::AlertKind,
    cli::{self, Cli, RunArgs, run::effective_config},
    config::Config,
};
use serde::Deserialize as _;
use serde_json::Value;
use tests::{
    deploy::{DAEMONSET, UNIT, deploy_path, read_deploy, unit_words},
    http_client::try_request,
    observer::Observer,
    privileged,
    reference_gateway::Gateway,
    temp_dir,
    upstream::{Behavior, Upstream},
    wait_until,
};

const HOST_CONFIG: &str = "systemd/config.toml";
const RULES: &str = "prometheus/gateway-observer.rules.yml";
const RULE_TESTS: &str = "prometheus/gateway-observer.rules.test.yml";
const DASHBOARD: &str = "grafana/gateway-observer.json";

/// Where the unit and the DaemonSet install the config.
const INSTALLED_CONFIG: &str = "/etc/gateway-observer/config.toml";

/// Every YAML document of a deploy file, as JSON values.
fn yaml_documents(relative: &str) -> Vec<Value> {
    let text = read_deploy(relative);
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{relative} is not valid YAML: {e}")))
        .collect()
}

/// Whether promtool is there. `cargo xtask setup` installs it, so under CI its absence fails.
fn have_promtool() -> bool {
    if Command::new("promtool").arg("--version").output().is_ok() {
        return true;
    }
    let why = "promtool is missing (Debian package prometheus, which `cargo xtask setup` installs)";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}, and CI=true");
    eprintln!("SKIPPED: {why}");
    false
}

/// Runs a tool to success and returns what it printed; a failure panics with that output.
fn run_tool(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{program} {}: {}\n{printed}", args.join(" "), out.status);
    printed
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// The `run` arguments of a command line, parsed by the daemon's own CLI.
fn run_args(argv: &[String]) -> RunArgs {
    match Cli::try_parse_from(argv) {
        Ok(Cli { command: cli::Command::Run(args) }) => args,
        Ok(other) => panic!("{argv:?} does not run the daemon: {other:?}"),
        Err(e) => panic!("the daemon's CLI rejects {argv:?}: {e}"),
    }
}

/// The config the daemon would run with, `local` standing for the file installed at
/// [`INSTALLED_CONFIG`]: flags and file through the same validation as `run`.
fn effective(mut args: RunArgs, local: &Path) -> Config {
    assert_eq!(
        args.config.as_deref(),
        Some(Path::new(INSTALLED_CONFIG)),
        "the config is installed at {INSTALLED_CONFIG}"
    );
    args.config = Some(local.to_owned());
    effective_config(&args).unwrap_or_else(|e| panic!("the daemon rejects {}: {e}", local.display()))
}

#[test]
fn systemd_unit_runs_the_daemon_with_the_example_config() {
    let unit = read_deploy(UNIT);
    let exec = unit_words(&unit, "ExecStart");
    assert!(!exec.is_empty(), "the unit has an ExecStart");
    assert_eq!(exec[0], "/usr/bin/gateway-observer", "where the Debian package installs it");
    effective(run_args(&exec), &deploy_path(HOST_CONFIG));
    for cap in ["CAP_BPF", "CAP_PERFMON"] {
        assert!(unit.contains(cap), "the unit's capabilities lack {cap}");
    }
    // It comes with systemd, which a container host may not have; setup does not install it.
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        eprintln!("SKIPPED systemd-analyze verify {UNIT}: systemd-analyze is not installed");
        return;
    }
    // verify wants the ExecStart binary to exist: the copy runs the one just built.
    let copy = temp_dir("deploy-unit").join("gateway-observer.service");
    std::fs::write(&copy, unit.replace(&exec[0], &tests::binary("gateway-observer").to_string_lossy()))
        .expect("write the unit");
    let printed = run_tool("systemd-analyze", &["verify", path_str(&copy)]);
    // verify exits 0 after an unknown key or a bad value, only printing it.
    assert!(printed.trim().is_empty(), "systemd-analyze verify {UNIT}:\n{printed}");
}

/// The ConfigMap and the DaemonSet.
fn kubernetes_objects() -> (Value, Value) {
    let docs = yaml_documents(DAEMONSET);
    let of_kind = |kind: &str| {
        let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "{DAEMONSET}: one {kind} expected");
        found[0].clone()
    };
    (of_kind("ConfigMap"), of_kind("DaemonSet"))
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().map(|v| v.as_str().expect("a string").to_owned()).collect()
}

/// The paths the kubelet and Prometheus ask the daemon for: its probes and the scrape path.
fn daemonset_http_paths(daemonset: &Value) -> Vec<String> {
    let template = &daemonset["spec"]["template"];
    let container = &template["spec"]["containers"][0];
    let mut paths: Vec<String> = ["startupProbe", "livenessProbe", "readinessProbe"]
        .iter()
        .map(|probe| container[probe]["httpGet"]["path"].as_str().expect("an httpGet probe").to_owned())
        .collect();
    paths.push(template["metadata"]["annotations"]["prometheus.io/path"].as_str().expect("scrape path").to_owned());
    paths
}

/// A Kubernetes memory quantity ("96Mi") in bytes.
fn quantity_bytes(quantity: &Value) -> u64 {
    let text = quantity.as_str().expect("a quantity string");
    let (number, scale) = [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)]
        .iter()
        .find_map(|(suffix, scale)| text.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((text, 1));
    number.parse::<u64>().unwrap_or_else(|_| panic!("quantity {text}")) * scale
}

#[test]
fn daemonset_runs_the_daemon_with_its_configmap() {
    let (config_map, daemonset) = kubernetes_objects();
    assert_eq!(daemonset["apiVersion"], "apps/v1");
    for object in [&config_map, &daemonset] {
        assert!(object["metadata"]["namespace"].is_null(), "the namespace is the one applied to");
    }
    let template = &daemonset["spec"]["template"];
    for (key, value) in daemonset["spec"]["selector"]["matchLabels"].as_object().expect("a selector") {
        assert_eq!(&template["metadata"]["labels"][key], value, "the selector must select the pods");
    }
    let pod = &template["spec"];
    assert_eq!(pod["hostPID"], true, "the daemon watches the node's processes by their pids");
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let container = &containers[0];

    // The config file: mounted from the ConfigMap where the args say.
    let argv: Vec<String> = [strings(&container["command"]), strings(&container["args"])].concat();
    let mount = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| Path::new(INSTALLED_CONFIG).parent() == m["mountPath"].as_str().map(Path::new))
        .expect("a volume mounted at the config's directory");
    let volume = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == mount["name"])
        .expect("the config volume");
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"]);
    let file_name = Path::new(INSTALLED_CONFIG).file_name().and_then(|n| n.to_str()).expect("file name");
    let text = config_map["data"][file_name].as_str().expect("the ConfigMap holds config.toml");
    let local = temp_dir("deploy-configmap").join(file_name);
    std::fs::write(&local, text).expect("write the config");
    let config = effective(run_args(&argv), &local);

    // Its listener is what the port, the probes and the scrape annotations point at.
    assert!(
        config.listen.ip().is_unspecified(),
        "the kubelet and Prometheus reach the pod's IP: listen on 0.0.0.0, not {}",
        config.listen
    );
    let port = container["ports"].as_array().and_then(|p| p.first()).expect("a container port");
    assert_eq!(port["containerPort"], config.listen.port(), "containerPort vs the config's listen port");
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert_eq!(container[probe]["httpGet"]["port"], port["name"], "{probe} port");
    }
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/live");
    let annotations = &template["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], config.listen.port().to_string());
    assert_eq!(annotations["prometheus.io/path"], "/metrics");

    let security = &container["securityContext"];
    let added = strings(&security["capabilities"]["add"]);
    let has = |cap: &str| added.iter().any(|a| a == cap);
    assert!(security["privileged"] == true || (has("BPF") && has("PERFMON")), "needs BPF and PERFMON: {added:?}");
    assert!(
        container["volumeMounts"].as_array().into_iter().flatten().any(|m| m["mountPath"] == "/sys/kernel/btf"),
        "the programs need the node's BTF"
    );
    let resources = &container["resources"];
    assert!(quantity_bytes(&resources["requests"]["memory"]) <= quantity_bytes(&resources["limits"]["memory"]));
}

/// Every alert kind. The match has no wildcard: a new kind stops this compiling until it is
/// listed here, and then the test below wants a rule for it.
fn alert_kinds() -> Vec<AlertKind> {
    use AlertKind::*;
    // By what they watch: threads, then requests.
    let threads = [EventLoopBlocked, EventLoopBusy, PoolSaturated, JvmPause];
    let requests = [UpstreamNoResponse, OneWayStall, RequestQueueing, RequestsStalled];
    let kinds: Vec<AlertKind> = threads.into_iter().chain(requests).collect();
    for kind in &kinds {
        match kind {
            EventLoopBlocked | EventLoopBusy | PoolSaturated | JvmPause | UpstreamNoResponse | OneWayStall
            | RequestQueueing | RequestsStalled => {}
        }
    }
    kinds
}

/// (alert name, expression) of every alerting rule.
fn alert_rules() -> Vec<(String, String)> {
    let rules = yaml_documents(RULES).remove(0);
    rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| (r["alert"].as_str().unwrap_or_default().to_owned(), r["expr"].as_str().expect("expr").to_owned()))
        .collect()
}

#[test]
fn alert_rules_cover_every_kind_and_pass_promtool() {
    let rules = alert_rules();
    let tests = read_deploy(RULE_TESTS);
    for kind in alert_kinds().into_iter().map(AlertKind::as_str) {
        let (_, expr) =
            rules.iter().find(|(name, _)| name == kind).unwrap_or_else(|| panic!("no alert rule named {kind}"));
        assert_eq!(expr, &format!("gateway_observer_alerts{{kind=\"{kind}\"}} == 1"), "rule {kind}");
        assert!(tests.contains(&format!("kind=\"{kind}\"")), "{RULE_TESTS} never fires {kind}");
    }
    if !have_promtool() {
        return;
    }
    run_tool("promtool", &["check", "rules", path_str(&deploy_path(RULES))]);
    let printed = run_tool("promtool", &["test", "rules", path_str(&deploy_path(RULE_TESTS))]);
    eprintln!("{printed}");
}

/// The dashboard's PromQL: each panel target's, and the selector inside each variable's
/// `label_values(SELECTOR, label)`.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let targets = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default());
    let mut queries: Vec<String> = targets.filter_map(|t| t["expr"].as_str().map(str::to_owned)).collect();
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(inner) = variable["definition"].as_str().and_then(|d| d.strip_prefix("label_values(")) {
            queries.push(inner.rsplit_once(',').expect("label_values(SELECTOR, label)").0.to_owned());
        }
    }
    queries
}

fn dashboard() -> Value {
    serde_json::from_str(&read_deploy(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"))
}

#[test]
fn dashboard_has_its_variables_and_panels() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"].as_array().expect("variables");
    let variable =
        |name: &str| variables.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no ${name} variable"));
    assert_eq!(variable("datasource")["type"], "datasource");
    assert_eq!(variable("datasource")["query"], "prometheus");
    for name in ["instance", "process"] {
        let definition = variable(name)["definition"].as_str().unwrap_or_default();
        assert!(definition.ends_with(&format!(", {name})")), "${name} lists {name} label values: {definition}");
    }

    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().expect("a title");
        assert!(ids.insert(panel["id"].as_u64().expect("an id")), "panel id of {title} repeats");
        let grid = &panel["gridPos"];
        let right = grid["x"].as_u64().expect("x") + grid["w"].as_u64().expect("w");
        assert!(right <= 24 && grid["h"].as_u64() > Some(0), "{title} lies outside the 24-column grid");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title} must use the datasource variable");
        let targets =
            panel["targets"].as_array().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("{title} has no query"));
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(expr.contains("instance=~\"$instance\""), "{title}: {expr} ignores $instance");
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
        }
    }

    let queries = dashboard_queries(&dashboard);
    let shown = |needle: &str| queries.iter().any(|q| q.contains(needle));
    for metric in [
        "event_loop_utilization",
        "event_loop_iteration_seconds_bucket",
        "thread_offcpu_seconds_total",
        "pool_threads",
        "http_requests_total",
        "http_socket_queue_seconds_bucket",
        "socket_waiting_connections",
        "upstream_outstanding_requests",
        "upstream_oldest_request_age_seconds",
        "tcp_retransmits_total",
        "tcp_one_way_flows",
        "alerts{",
        "bpf_events_lost_total",
        "bpf_program_run_seconds_total",
    ] {
        assert!(shown(&format!("gateway_observer_{metric}")), "no panel shows gateway_observer_{metric}");
    }
    assert!(shown(
        "histogram_quantile(0.99, sum by (le, process, direction) (rate(gateway_observer_http_request_duration_seconds_bucket"
    ));
    assert!(shown("process=~\"$process\""), "no panel follows $process");
}

#[test]
fn dashboard_queries_are_valid_promql() {
    if !have_promtool() {
        return;
    }
    // promtool parses rule files: each query becomes a recording rule, Grafana's variables
    // replaced by what they expand to. A JSON string is a valid YAML scalar.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, query) in dashboard_queries(&dashboard()).iter().enumerate() {
        let promql = query.replace("$__rate_interval", "1m").replace("$instance", ".*").replace("$process", ".*");
        rules.push_str(&format!("      - record: dashboard:query_{i}\n        expr: {}\n", Value::from(promql)));
    }
    let path = temp_dir("deploy-dashboard").join("queries.rules.yml");
    std::fs::write(&path, rules).expect("write the queries");
    run_tool("promtool", &["check", "rules", path_str(&path)]);
}

/// What a scrape says: each family's TYPE, and the label names its samples carry (no `le`).
struct Scrape {
    types: BTreeMap<String, String>,
    labels: BTreeMap<String, BTreeSet<String>>,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut scrape = Scrape { types: BTreeMap::new(), labels: BTreeMap::new() };
        for line in text.lines() {
            if let Some(declared) = line.strip_prefix("# TYPE ") {
                let (name, kind) = declared.split_once(' ').expect("# TYPE name kind");
                scrape.types.insert(name.to_owned(), kind.to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                let family =
                    scrape.family_of(&line[..end]).unwrap_or_else(|| panic!("sample before its # TYPE: {line}"));
                let names = sample_label_names(&line[end..]).into_iter().filter(|n| n != "le");
                scrape.labels.entry(family).or_default().extend(names);
            }
        }
        scrape
    }

    /// The family a series name belongs to: itself, or a histogram's `_bucket`/`_sum`/`_count`.
    fn family_of(&self, name: &str) -> Option<String> {
        if self.types.contains_key(name) {
            return Some(name.to_owned());
        }
        ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .find(|base| self.types.get(*base).is_some_and(|kind| kind == "histogram"))
            .map(str::to_owned)
    }

    /// The labels a series of `name` may be selected or grouped by, or None when the daemon
    /// printed no sample of it (an alert kind that has not fired, no retransmits yet).
    fn selectable(&self, name: &str) -> Option<BTreeSet<String>> {
        let mut labels = self.labels.get(&self.family_of(name)?)?.clone();
        labels.extend(["instance", "job"].map(str::to_owned)); // added by Prometheus
        if name.ends_with("_bucket") {
            labels.insert("le".into());
        }
        Some(labels)
    }
}

/// Label names of `{k="v",...} value`, honouring escapes in the values.
fn sample_label_names(tail: &str) -> Vec<String> {
    let mut names = Vec::new();
    let Some(mut rest) = tail.strip_prefix('{') else { return names };
    while let Some(eq) = rest.find("=\"") {
        names.push(rest[..eq].trim_start_matches(',').to_owned());
        let mut escaped = false;
        let Some(close) = rest[eq + 2..].find(|c| {
            let quote = c == '"' && !escaped;
            escaped = c == '\\' && !escaped;
            quote
        }) else {
            break;
        };
        rest = &rest[eq + 2 + close + 1..];
    }
    names
}

/// Each `gateway_observer_` series a text names, with the label names of its matchers.
fn selectors(text: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("gateway_observer_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        let matchers = tail[end..].strip_prefix('{').and_then(|m| m.split_once('}')).map_or("", |(m, _)| m);
        let labels = matchers.split(',').filter_map(|m| m.split(['=', '!']).next()).map(str::trim);
        found.push((tail[..end].to_owned(), labels.filter(|l| !l.is_empty()).map(str::to_owned).collect()));
        rest = &tail[end..];
    }
    found
}

/// The labels of every `by (...)` in a PromQL expression.
fn grouping_labels(expr: &str) -> Vec<String> {
    expr.match_indices("by (")
        .filter_map(|(at, by)| expr[at + by.len()..].split_once(')'))
        .flat_map(|(labels, _)| labels.split(',').map(|l| l.trim().to_owned()))
        .collect()
}

/// Checks one PromQL expression against the scrape; returns problems, and notes the series whose
/// labels could not be checked because the daemon printed no sample of them.
fn check_expr(scrape: &Scrape, file: &str, expr: &str, unchecked: &mut BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut grouping = Some(BTreeSet::new());
    for (name, matched) in selectors(expr) {
        let Some(allowed) = scrape.selectable(&name) else {
            unchecked.insert(name);
            grouping = None;
            continue;
        };
        for label in matched.iter().filter(|l| !allowed.contains(*l)) {
            problems.push(format!("{file}: {name} has no label {label:?} (it has {allowed:?})"));
        }
        if let Some(g) = &mut grouping {
            g.extend(allowed);
        }
    }
    if let Some(available) = grouping {
        for label in grouping_labels(expr).iter().filter(|l| !available.contains(*l)) {
            problems.push(format!("{file}: `by ({label})` in {expr}: no series there has that label"));
        }
    }
    problems
}

/// Sends requests through the gateway until the daemon shows them, its upstream peers and its
/// event loops; returns that scrape.
fn scrape_after_traffic(observer: &Observer, gateway_port: u16) -> String {
    for i in 0..40 {
        let r = try_request(gateway_port, "GET", &format!("/items/{i}"), &[], b"", Duration::from_secs(5))
            .expect("request");
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let wanted = [
        "gateway_observer_http_requests_total{",
        "gateway_observer_upstream_outstanding_requests{",
        "gateway_observer_event_loop_utilization{",
    ];
    let mut text = String::new();
    wait_until("requests, upstream peers and event loops in /metrics", Duration::from_secs(15), || {
        text = observer.get("/metrics").map(|(_, body)| body).unwrap_or_default();
        wanted.iter().all(|w| text.contains(w))
    });
    text
}

#[test]
fn deploy_files_use_only_what_the_daemon_exports() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("items", Behavior::Echo);
    let gateway = Gateway::start(&format!(
        "[upstreams.items]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"items\"\n",
        upstream.addr()
    ));
    let config = deploy_path(HOST_CONFIG);
    let observer = Observer::start_with(&[&format!("pid={}", gateway.pid())], &["--config", path_str(&config)]);
    let scrape = Scrape::parse(&scrape_after_traffic(&observer, gateway.port));

    // Every metric named anywhere in the files (comments too) is a family the daemon declares.
    let files = [RULES, RULE_TESTS, DASHBOARD];
    let mut missing = BTreeSet::new();
    for file in files {
        for (name, _) in selectors(&read_deploy(file)) {
            if scrape.family_of(&name).is_none() {
                missing.insert(format!("{name} (in {file})"));
            }
        }
    }
    assert!(missing.is_empty(), "not exported by the daemon: {missing:#?}\ndeclared: {:#?}", scrape.types.keys());

    // Selectors and groupings use labels those metrics carry.
    let mut problems = Vec::new();
    let mut unchecked = BTreeSet::new();
    let rule_exprs = alert_rules().into_iter().map(|(_, expr)| expr);
    for (file, expr) in
        rule_exprs.map(|e| (RULES, e)).chain(dashboard_queries(&dashboard()).into_iter().map(|e| (DASHBOARD, e)))
    {
        problems.extend(check_expr(&scrape, file, &expr, &mut unchecked));
    }
    // The rule tests' input series carry exactly the daemon's labels (plus job and instance).
    let tests = yaml_documents(RULE_TESTS).remove(0);
    let series = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["input_series"].as_array().cloned().unwrap_or_default());
    for series in series.filter_map(|s| s["series"].as_str().map(str::to_owned)) {
        let Some((name, labels)) = selectors(&series).pop() else { continue };
        let Some(allowed) = scrape.selectable(&name) else {
            unchecked.insert(name);
            continue;
        };
        let given: BTreeSet<String> = labels.into_iter().collect();
        if given != allowed {
            problems.push(format!("{RULE_TESTS}: {series} has labels {given:?}, the daemon's series {allowed:?}"));
        }
    }
    eprintln!("labels not checked (no sample in this scrape): {unchecked:?}");
    assert!(problems.is_empty(), "{problems:#?}");

    // The DaemonSet's probes and scrape path are routes the daemon serves.
    let (_, daemonset) = kubernetes_objects();
    for path in daemonset_http_paths(&daemonset) {
        let (status, body) = observer.get(&path).unwrap_or_default();
        assert_eq!(status, 200, "GET {path}: {body}");
    }
    // Its memory request covers what the daemon holds now.
    let status = std::fs::read_to_string(format!("/proc/{}/status", observer.pid())).expect("daemon status");
    let rss = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().strip_suffix(" kB"));
    let rss_kib: u64 = rss.and_then(|v| v.parse().ok()).expect("VmRSS in /proc/PID/status");
    let request =
        quantity_bytes(&daemonset["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"]);
    eprintln!("daemon RSS {} MiB, DaemonSet memory request {} MiB", rss_kib >> 10, request >> 20);
    assert!(rss_kib << 10 <= request, "the daemon holds {rss_kib} KiB, over the DaemonSet's memory request");
}
