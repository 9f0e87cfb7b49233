//! Thread names to thread groups: the numbered members of a pool share one group
//! (`pool-3-thread-17` → `pool-3-thread-*`, `reactor-http-nio-2` → `reactor-http-nio-*`), so
//! metric labels stay bounded however large a pool grows.

/// The group name of a thread: a trailing run of digits (after an optional separator) becomes `*`.
/// Names without a trailing number are their own group.
pub fn thread_group(name: &str) -> String {
    let name = name.trim_end_matches('\n');
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.len() == name.len() || stem.is_empty() {
        return name.to_owned();
    }
    format!("{stem}*")
}

#[cfg(test)]
mod tests {
    use super::thread_group;

    #[test]
    fn numbered_pool_members_share_a_group() {
        assert_eq!(thread_group("pool-3-thread-17"), "pool-3-thread-*");
        assert_eq!(thread_group("pool-3-thread-1"), "pool-3-thread-*");
        assert_eq!(thread_group("reactor-http-nio-2"), "reactor-http-nio-*");
        assert_eq!(thread_group("tokio-runtime-w"), "tokio-runtime-w");
        assert_eq!(thread_group("worker12"), "worker*");
        assert_eq!(thread_group("gw-worker-0"), "gw-worker-*");
    }

    #[test]
    fn names_that_are_not_numbered_stay_whole() {
        assert_eq!(thread_group("nginx"), "nginx");
        assert_eq!(thread_group("C2 CompilerThre"), "C2 CompilerThre");
        // Only a trailing number is a member index; a number inside the name is part of the pool's name.
        assert_eq!(thread_group("pool-3-thread"), "pool-3-thread");
        assert_eq!(thread_group("1234"), "1234", "an all-digit name has no stem to keep");
        assert_eq!(thread_group(""), "");
    }
}
