mod bench_gateway;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [bench, gateway, rest @ ..] = args.as_slice() && bench == "bench" && gateway == "gateway" { return bench_gateway::run(rest); }
    Ok(())
}
