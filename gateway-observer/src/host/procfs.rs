//! Reads of /proc: process and thread names, thread lists, parents. Every read tolerates the
//! process having exited meanwhile (it returns `None` or an empty list, never an error to crash on).
//! The text is parsed by the `parse_*` functions, which touch no file (and are fuzzed:
//! `gateway-observer/fuzz`); a comm in that text is the target's to choose.

use std::{fs, path::Path};

/// The process's (or thread's) `comm`, without the trailing newline.
pub fn comm(pid: u32) -> Option<String> {
    read_comm(&format!("/proc/{pid}/comm"))
}

/// A thread's `comm`.
pub fn thread_comm(tgid: u32, tid: u32) -> Option<String> {
    read_comm(&format!("/proc/{tgid}/task/{tid}/comm"))
}

fn read_comm(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim_end_matches('\n').to_owned())
}

pub fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Thread ids of a process.
pub fn threads(pid: u32) -> Vec<u32> {
    numeric_entries(&format!("/proc/{pid}/task"))
}

/// Every process id on the host.
pub fn processes() -> Vec<u32> {
    numeric_entries("/proc")
}

fn numeric_entries(dir: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(Result::ok).filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok())).collect()
}

/// A thread's scheduler state letter from /proc/TGID/task/TID/stat (R, S, D, ...).
pub fn thread_state(tgid: u32, tid: u32) -> Option<char> {
    parse_stat_state(&fs::read_to_string(format!("/proc/{tgid}/task/{tid}/stat")).ok()?)
}

/// The state letter of a stat line: the first field after the comm's closing parenthesis.
pub fn parse_stat_state(stat: &str) -> Option<char> {
    stat.get(stat.rfind(')')? + 1..)?.split_whitespace().next()?.chars().next()
}

/// The syscall a blocked thread is in, with its six arguments, from /proc/TGID/task/TID/syscall
/// ("running" or "-1 ..." when it is in none).
pub fn thread_syscall(tgid: u32, tid: u32) -> Option<(u32, [u64; 6])> {
    parse_syscall(&fs::read_to_string(format!("/proc/{tgid}/task/{tid}/syscall")).ok()?)
}

pub fn parse_syscall(text: &str) -> Option<(u32, [u64; 6])> {
    let mut fields = text.split_whitespace();
    let nr: u32 = fields.next()?.parse().ok()?;
    let mut args = [0u64; 6];
    for arg in &mut args {
        *arg = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
    }
    Some((nr, args))
}

/// Parent pid from /proc/PID/stat.
pub fn parent(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_ppid(&stat)
}

/// (parent, comm) from one read of /proc/PID/stat, for scans of every process on the host.
pub fn parent_and_comm(pid: u32) -> Option<(u32, String)> {
    // The main thread's own stat: the process's stat sums the CPU time of every thread, a walk
    // of 2,000 threads in a big JVM, every tick. Its comm and parent are the process's.
    parse_stat_parent_and_comm(&fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat")).ok()?)
}

/// (parent, comm) of a stat line.
pub fn parse_stat_parent_and_comm(stat: &str) -> Option<(u32, String)> {
    let comm = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?.to_owned();
    Some((parse_stat_ppid(stat)?, comm))
}

/// The comm in /proc/PID/stat is in parentheses and may itself hold spaces and ')', so fields are
/// counted from the last ')'.
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    after.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time the process (all its threads) has used: user + system, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    parse_stat_cpu_ticks(&stat).map(|ticks| ticks as f64 / ticks_per_second.max(1) as f64)
}

/// utime + stime (fields 14 and 15; the 12th and 13th after the comm's closing parenthesis).
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

/// How long ago the process started: /proc/PID/stat's starttime (clock ticks after boot) against
/// CLOCK_BOOTTIME, the clock it is counted on.
pub fn process_age(pid: u32) -> Option<std::time::Duration> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let started = parse_stat_start_ticks(&stat)? as f64 / ticks_per_second;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    let now = ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9;
    std::time::Duration::try_from_secs_f64((now - started).max(0.0)).ok()
}

/// starttime (field 22; the 20th after the comm's closing parenthesis).
pub fn parse_stat_start_ticks(stat: &str) -> Option<u64> {
    stat.get(stat.rfind(')')? + 1..)?.split_whitespace().nth(19)?.parse().ok()
}

/// All descendants of `root` (children, grandchildren, ...), from one pass over /proc.
pub fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = processes().into_iter().filter_map(|pid| Some((pid, parent(pid)?))).collect();
    descendants_in(root, &parents)
}

fn descendants_in(root: u32, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(pid) = frontier.pop() {
        for &(child, parent) in parents {
            if parent == pid && child != root && !found.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

/// Local ports the process listens on with TCP (its own sockets, in its network namespace).
pub fn listening_ports(pid: u32) -> std::collections::BTreeSet<u16> {
    listening_ports_among(pid, &listen_rows(pid))
}

/// The ports of `rows` (its namespace's listening sockets, read once for every process there)
/// that are the process's own sockets.
pub fn listening_ports_among(pid: u32, rows: &[ListenRow]) -> std::collections::BTreeSet<u16> {
    let listening: std::collections::HashMap<u64, u16> = rows.iter().map(|row| (row.inode, row.port)).collect();
    if listening.is_empty() {
        return Default::default();
    }
    socket_inodes(pid).into_iter().filter_map(|inode| listening.get(&inode).copied()).collect()
}

/// A TCP listening socket of a network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenRow {
    pub inode: u64,
    pub port: u16,
    /// Connections handshaken and not yet accepted (the kernel's `sk_ack_backlog`).
    pub accept_queue: u32,
}

/// The LISTEN rows of `pid`'s network namespace (IPv4 and IPv6). The kernel lists listening
/// sockets before connections, so reading stops at the first other row; the kernel still walks
/// its connection hash to find that row, so callers read this once per namespace, and seldom.
pub fn listen_rows(pid: u32) -> Vec<ListenRow> {
    use std::io::BufRead;
    let mut rows = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(file) = fs::File::open(format!("/proc/{pid}/net/{table}")) else { continue };
        let lines = std::io::BufReader::new(file).lines().skip(1).map_while(Result::ok);
        rows.extend(lines.map_while(|line| parse_listen_row(&line)));
    }
    rows
}

/// A /proc/net/tcp{,6} row if it is a listening socket. For those the rx_queue column is the
/// accept queue's length.
pub fn parse_listen_row(line: &str) -> Option<ListenRow> {
    const TCP_LISTEN: &str = "0A";
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (local, state, queues, inode) = (fields.get(1)?, fields.get(3)?, fields.get(4)?, fields.get(9)?);
    if *state != TCP_LISTEN {
        return None;
    }
    let port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
    let accept_queue = u32::from_str_radix(queues.split_once(':')?.1, 16).ok()?;
    Some(ListenRow { inode: inode.parse().ok()?, port, accept_queue })
}

/// TcpExt ListenOverflows of `pid`'s network namespace: connections dropped because an accept
/// queue was full (the clients see timeouts and retried SYNs).
pub fn listen_overflows(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/net/netstat")).ok()?;
    parse_netstat_field(&text, "TcpExt:", "ListenOverflows")
}

/// A field of /proc/net/netstat, where each group is a header line then a value line.
pub fn parse_netstat_field(text: &str, group: &str, field: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(group));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        if let Some(index) = names.split_whitespace().position(|name| name == field) {
            return values.split_whitespace().nth(index)?.parse().ok();
        }
    }
    None
}

/// (local, remote) addresses of the TCP socket open as `fd` in process `pid`: for a connection
/// whose handshake the daemon did not see (its event was lost), from the process's own tables.
pub fn tcp_addresses(pid: u32, fd: u32) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    let link = fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    let inode = parse_socket_link(link.to_str()?)?;
    ["tcp", "tcp6"].iter().find_map(|table| {
        parse_tcp_table_addresses(&fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok()?, inode)
    })
}

/// (local, remote) addresses of the socket `inode` in a /proc/net/tcp{,6} table.
pub fn parse_tcp_table_addresses(table: &str, inode: u64) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(9)?.parse::<u64>().ok()? != inode {
            return None;
        }
        Some((parse_proc_addr(fields.get(1)?)?, parse_proc_addr(fields.get(2)?)?))
    })
}

/// The inode of a socket fd's link (`socket:[31337]`).
pub fn parse_socket_link(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// `0100007F:1F90` (IPv4) or 32 hex digits + port (IPv6), each 32-bit word in host order.
pub fn parse_proc_addr(field: &str) -> Option<std::net::SocketAddr> {
    let (ip_hex, port_hex) = field.split_once(':')?;
    let port = u16::from_str_radix(port_hex, 16).ok()?;
    let words: Vec<u32> = (0..ip_hex.len() / 8)
        .map(|i| u32::from_str_radix(ip_hex.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let ip = match words.as_slice() {
        [v4] => std::net::IpAddr::from(v4.to_ne_bytes()),
        [a, b, c, d] => {
            let mut octets = [0u8; 16];
            for (chunk, word) in octets.chunks_mut(4).zip([a, b, c, d]) {
                chunk.copy_from_slice(&word.to_ne_bytes());
            }
            let v6 = std::net::Ipv6Addr::from(octets);
            v6.to_ipv4_mapped().map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4)
        }
        _ => return None,
    };
    Some(std::net::SocketAddr::new(ip, port))
}

/// The pid the process has in its own pid namespace (the last of /proc/PID/status's `NSpid`), or
/// its pid where the kernel predates that line.
pub fn namespace_pid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(parse_namespace_pid(&status).unwrap_or(pid))
}

pub fn parse_namespace_pid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// The process's real, effective, saved and filesystem uids (/proc/PID/status `Uid:`), as the
/// host sees them: whose files it could have written.
pub fn uids(pid: u32) -> Vec<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    parse_uids(&status)
}

pub fn parse_uids(status: &str) -> Vec<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap_or_default();
    line.split_whitespace().filter_map(|v| v.parse().ok()).collect()
}

/// The effective capability set of a status text (`CapEff:`, hex).
pub fn parse_effective_capabilities(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    u64::from_str_radix(hex, 16).ok()
}

/// The cgroup paths of a process, one per hierarchy (a single `0::/path` line on cgroup v2).
pub fn cgroups(pid: u32) -> Vec<String> {
    fs::read_to_string(format!("/proc/{pid}/cgroup")).map(|text| parse_cgroups(&text)).unwrap_or_default()
}

/// The paths of /proc/PID/cgroup's `ID:CONTROLLERS:PATH` lines.
pub fn parse_cgroups(text: &str) -> Vec<String> {
    text.lines().filter_map(|line| line.splitn(3, ':').nth(2)).map(str::to_owned).collect()
}

/// The process's network namespace (`net:[INODE]`), to read each namespace's tables once.
pub fn net_namespace(pid: u32) -> Option<String> {
    fs::read_link(format!("/proc/{pid}/ns/net")).ok()?.to_str().map(str::to_owned)
}

/// The inode number of the process's network namespace (`net:[4026531840]` → 4026531840).
pub fn net_namespace_inum(pid: u32) -> Option<u32> {
    parse_net_namespace_link(&net_namespace(pid)?)
}

/// The inode number of a `net:[INODE]` link.
pub fn parse_net_namespace_link(link: &str) -> Option<u32> {
    link.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// Inodes of the process's open sockets (`/proc/PID/fd/N -> socket:[INODE]`).
pub fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| fs::read_link(entry.path()).ok())
        .filter_map(|target| parse_socket_link(target.to_str()?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_stat_read_gives_the_parent_and_comm_the_separate_files_give() {
        let me = std::process::id();
        assert_eq!(parent_and_comm(me), Some((parent(me).expect("parent"), comm(me).expect("comm"))));
    }

    #[test]
    fn the_pid_a_process_sees_is_its_innermost() {
        assert_eq!(parse_namespace_pid("Name:\tjava\nNSpid:\t4398\t1\nNSpgid:\t1\n"), Some(1));
        assert_eq!(parse_namespace_pid("Name:\tjava\nNSpid:\t4398\n"), Some(4398));
        assert_eq!(parse_uids("Name:\tnginx\nUid:\t33\t33\t0\t33\nGid:\t33\n"), vec![33, 33, 0, 33]);
        assert_eq!(parse_namespace_pid("Name:\tjava\n"), None);
        assert_eq!(namespace_pid(std::process::id()), Some(std::process::id()), "the tests run in the host's");
    }

    #[test]
    fn listening_rows_of_a_tcp_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000011 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0100007F:D2F0 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 31338 1 0000000000000000 20 4 30 10 -1
   2: garbage";
        let rows: Vec<ListenRow> = table.lines().skip(1).map_while(parse_listen_row).collect();
        assert_eq!(rows, vec![ListenRow { inode: 31337, port: 8080, accept_queue: 17 }]);
        assert_eq!(parse_listen_row("   2: garbage"), None);
    }

    #[test]
    fn accept_queue_of_a_listener_nobody_accepts() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let _clients: Vec<_> =
            (0..3).map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect")).collect();
        let row = listen_rows(std::process::id()).into_iter().find(|r| r.port == port).expect("listed");
        assert_eq!(row.accept_queue, 3);
    }

    #[test]
    fn cgroups_and_namespace_of_this_process() {
        let cgroups = cgroups(std::process::id());
        assert!(!cgroups.is_empty() && cgroups.iter().all(|c| c.starts_with('/')), "{cgroups:?}");
        assert!(net_namespace(std::process::id()).is_some_and(|ns| ns.starts_with("net:[")));
        let inum = net_namespace_inum(std::process::id()).expect("inum");
        assert_eq!(net_namespace(std::process::id()), Some(format!("net:[{inum}]")));
    }

    #[test]
    fn netstat_fields() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 42 43\nIpExt: InNoRoutes\nIpExt: 7\n";
        assert_eq!(parse_netstat_field(text, "TcpExt:", "ListenOverflows"), Some(42));
        assert_eq!(parse_netstat_field(text, "IpExt:", "InNoRoutes"), Some(7));
        assert_eq!(parse_netstat_field(text, "TcpExt:", "Nope"), None);
        assert!(listen_overflows(std::process::id()).is_some());
    }

    #[test]
    fn proc_net_addresses() {
        assert_eq!(parse_proc_addr("0100007F:1F90"), Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(parse_proc_addr("0000000000000000FFFF00000100007F:0050"), Some("127.0.0.1:80".parse().unwrap()));
        assert_eq!(parse_proc_addr("zz:1"), None);
    }

    #[test]
    fn finds_the_addresses_of_a_connected_socket() {
        use std::os::fd::AsRawFd as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
        let (local, remote) = tcp_addresses(std::process::id(), client.as_raw_fd() as u32).expect("found");
        assert_eq!(local, client.local_addr().unwrap());
        assert_eq!(remote, listener.local_addr().unwrap());
    }

    #[test]
    fn finds_a_port_this_process_listens_on() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert!(listening_ports(std::process::id()).contains(&port));
    }

    #[test]
    fn ppid_survives_odd_comms() {
        assert_eq!(parse_stat_ppid("123 (nginx) S 1 123 123 0"), Some(1));
        assert_eq!(parse_stat_ppid("77 (a) b) c) R 42 77 77 0"), Some(42));
        assert_eq!(parse_stat_ppid("garbage"), None);
    }

    #[test]
    fn cpu_ticks_of_a_stat_line() {
        let stat = "4242 (my gw) S 1 4242 4242 0 -1 4194560 2306 0 0 0 150 25 0 0 20 0 9 0 123 0 0";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(175));
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
        assert!(cpu_seconds(std::process::id()).is_some());
    }

    #[test]
    fn cpu_ticks_that_overflow_are_no_reading() {
        // Found by fuzzing (proc_text): the sum overflowed, a panic in debug builds.
        let stat = format!("4242 (gw) S 1 4242 4242 0 -1 4194560 2306 0 0 0 {} 1 0 0 20 0 9 0 123 0 0", u64::MAX);
        assert_eq!(parse_stat_cpu_ticks(&stat), None);
    }

    #[test]
    fn start_ticks_of_a_stat_line() {
        // starttime is the 22nd field: 123 here.
        let stat = "4242 (my gw) S 1 4242 4242 0 -1 4194560 2306 0 0 0 150 25 0 0 20 0 9 0 123 0 0";
        assert_eq!(parse_stat_start_ticks(stat), Some(123));
        assert_eq!(parse_stat_start_ticks("garbage"), None);
        let age = process_age(std::process::id()).expect("our own age");
        assert!(age < std::time::Duration::from_secs(3600), "this test process started {age:?} ago");
    }

    #[test]
    fn syscall_lines() {
        let (nr, args) = parse_syscall("202 0x7f00 0x189 0x0 0x7ffc 0x0 0xffffffff 0x7ffc 0x7f01").expect("parses");
        assert_eq!(nr, 202);
        assert_eq!(args[3], 0x7ffc);
        assert_eq!(parse_syscall("running"), None);
        assert_eq!(parse_syscall("-1 0x7ffc 0x7f01"), None);
    }

    #[test]
    fn descendants_follow_the_tree() {
        let tree = [(10, 1), (11, 10), (12, 10), (13, 11), (20, 1)];
        let mut found = descendants_in(10, &tree);
        found.sort_unstable();
        assert_eq!(found, vec![11, 12, 13]);
        assert!(descendants_in(20, &tree).is_empty());
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(exists(me));
        assert!(threads(me).contains(&me));
        assert!(comm(me).is_some());
        assert!(parent(me).is_some());
    }
}
