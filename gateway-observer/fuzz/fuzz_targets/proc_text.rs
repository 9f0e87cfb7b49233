//! Every /proc parser on any text. The kernel writes these files, but a comm inside a stat line
//! is the target's to choose (any bytes but NUL, `)` and spaces included), and the daemon must
//! survive a kernel whose format moved: no panic, and what parses is what the text said.

#![no_main]

use gateway_observer::host::procfs;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    let text = text.as_ref();
    // stat: a comm with any characters, then fields counted from its last ')'.
    let ppid = procfs::parse_stat_ppid(text);
    if let Some((parent, comm)) = procfs::parse_stat_parent_and_comm(text) {
        assert_eq!(Some(parent), ppid);
        assert!(text.contains(&format!("({comm})")), "comm {comm:?} of {text:?}");
    }
    let _ = procfs::parse_stat_state(text);
    let _ = procfs::parse_stat_cpu_ticks(text);
    let _ = procfs::parse_stat_start_ticks(text);
    let _ = procfs::parse_syscall(text);
    // status
    if let Some(pid) = procfs::parse_namespace_pid(text) {
        assert!(text.contains(&pid.to_string()));
    }
    assert!(procfs::parse_uids(text).len() <= text.len());
    let _ = procfs::parse_effective_capabilities(text);
    // cgroup, links
    assert!(procfs::parse_cgroups(text).len() <= text.lines().count());
    let _ = procfs::parse_socket_link(text);
    let _ = procfs::parse_net_namespace_link(text);
    // net/tcp{,6} and net/netstat, as the daemon reads them.
    let rows: Vec<_> = text.lines().skip(1).map_while(procfs::parse_listen_row).collect();
    assert!(rows.len() <= text.lines().count());
    for row in rows.iter().take(4) {
        let _ = procfs::parse_tcp_table_addresses(text, row.inode);
    }
    let _ = procfs::parse_tcp_table_addresses(text, 0);
    for field in text.split_whitespace().take(4) {
        let _ = procfs::parse_proc_addr(field);
        let _ = procfs::parse_netstat_field(text, "TcpExt:", field);
    }
    let _ = procfs::parse_netstat_field(text, "TcpExt:", "ListenOverflows");
});
