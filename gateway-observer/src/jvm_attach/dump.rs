//! HotSpot's thread dump text (`jstack`, the attach `threaddump` command) → threads with their
//! native TID and Java frames. Pure: the text comes from the target, so it is treated as hostile
//! (bounded input, bounded threads and frames, no panics); nothing here touches a process.

/// Bytes of a dump parsed; the rest is ignored (`cargo xtask bench jvm-dump`: 1,024 threads 40
/// frames deep make 2.5 MiB).
pub const MAX_DUMP_BYTES: usize = 8 << 20;
/// Threads kept from one dump.
pub const MAX_THREADS: usize = 8192;
/// Frames kept per thread (innermost first).
pub const MAX_FRAMES: usize = 64;
/// Characters kept of a thread name or frame.
const MAX_TEXT: usize = 256;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JavaThread {
    /// The Java name, as the JVM wrote it (escape it before showing it).
    pub name: String,
    /// The native thread id (`nid=0x..`), in the target's pid namespace.
    pub nid: u32,
    /// `java.lang.Thread.State` (`RUNNABLE`, `WAITING (parking)`…), empty for VM threads.
    pub state: String,
    /// Innermost first: `Class.method(File.java:N)` frames and their `- parking to wait for` /
    /// `- waiting on` / `- waiting to lock` lines.
    pub frames: Vec<String>,
}

impl JavaThread {
    /// Only the `Class.method(...)` frames, innermost first.
    pub fn java_frames(&self) -> impl Iterator<Item = &str> {
        self.frames.iter().filter(|f| !f.starts_with("- ")).map(String::as_str)
    }
}

/// The threads of a dump, in its order.
pub fn parse(text: &str) -> Vec<JavaThread> {
    let text = truncate(text, MAX_DUMP_BYTES);
    let mut threads: Vec<JavaThread> = Vec::new();
    let mut current: Option<JavaThread> = None;
    for line in text.lines() {
        if line.starts_with('"') {
            if let Some(done) = current.take() {
                threads.push(done);
            }
            if threads.len() >= MAX_THREADS {
                break;
            }
            current = header(line);
            continue;
        }
        let Some(thread) = current.as_mut() else { continue };
        let body = line.trim_start();
        if let Some(state) = body.strip_prefix("java.lang.Thread.State: ") {
            thread.state = truncate(state.trim(), MAX_TEXT).to_owned();
        } else if thread.frames.len() >= MAX_FRAMES {
            continue;
        } else if let Some(frame) = body.strip_prefix("at ") {
            thread.frames.push(short_frame(frame));
        } else if let Some(wait) = ["- parking to wait for", "- waiting on", "- waiting to lock"]
            .iter()
            .find(|prefix| body.starts_with(*prefix))
        {
            thread.frames.push(format!("{wait} {}", waited_class(body)));
        }
    }
    threads.extend(current);
    threads
}

/// `"name" #12 daemon prio=5 os_prio=0 cpu=1ms elapsed=2s tid=0x7f nid=0x1a2b waiting on condition`
fn header(line: &str) -> Option<JavaThread> {
    let nid_at = line.rfind(" nid=")?;
    let hex = line[nid_at + 5..].split_whitespace().next()?;
    let nid = u32::from_str_radix(hex.strip_prefix("0x").unwrap_or(hex), 16).or_else(|_| hex.parse::<u32>()).ok()?;
    let quoted = &line[1..nid_at];
    let name = quoted.rfind('"').map_or(quoted, |end| &quoted[..end]);
    Some(JavaThread { name: truncate(name, MAX_TEXT).to_owned(), nid, ..JavaThread::default() })
}

/// `java.util.concurrent.CompletableFuture.get(java.base@17.0.9/CompletableFuture.java:2022)` →
/// `CompletableFuture.get(CompletableFuture.java:2022)`: the package and module say little that
/// the class does not, and cost most of the width.
fn short_frame(frame: &str) -> String {
    let frame = without_hidden_class_addresses(truncate(frame.trim(), MAX_TEXT));
    let frame = frame.as_str();
    let (call, place) = match frame.find('(') {
        Some(open) => (&frame[..open], &frame[open..]),
        None => (frame, ""),
    };
    let call = match call.rfind('.') {
        Some(method_dot) => {
            let class = &call[..method_dot];
            let start = class.rfind('.').map_or(0, |dot| dot + 1);
            &call[start..]
        }
        None => call,
    };
    let place = match place.rfind('/') {
        Some(slash) => format!("({}", &place[slash + 1..]),
        None => place.to_owned(),
    };
    format!("{call}{place}")
}

/// A lambda's hidden class is named with its address (`Gateway$$Lambda$16/0x00007f59d4005c08`):
/// the address is cut (`Gateway$$Lambda$16`), as no raw address leaves the host.
fn without_hidden_class_addresses(frame: &str) -> String {
    let mut out = String::with_capacity(frame.len());
    let mut rest = frame;
    while let Some(at) = rest.find("/0x") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 3..];
        rest = after.trim_start_matches(|c: char| c.is_ascii_hexdigit());
    }
    out.push_str(rest);
    out
}

/// `- parking to wait for  <0x00000007> (a java.util.concurrent.CompletableFuture$Signaller)` →
/// `CompletableFuture$Signaller`; the address changes from dump to dump and would split groups.
fn waited_class(line: &str) -> String {
    let inside = line.rfind("(a ").map(|at| &line[at + 3..]).unwrap_or("");
    let class = inside.trim_end().trim_end_matches(')');
    let short = class.rfind('.').map_or(class, |dot| &class[dot + 1..]);
    truncate(short, MAX_TEXT).to_owned()
}

/// At most `max` bytes of `text`, cut on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = r#"2026-12-05 12:00:00
Full thread dump OpenJDK 64-Bit Server VM (17.0.9+9-Debian-1deb12u1 mixed mode, sharing):

Threads class SMR info:
_java_thread_list=0x00007f3c, length=3, elements={
0x00007f3c, 0x00007f3d
}

"reactor-http-nio-1" #14 prio=5 os_prio=0 cpu=120.50ms elapsed=9.12s tid=0x00007f3c nid=0x1a2b waiting on condition  [0x00007f3b]
   java.lang.Thread.State: TIMED_WAITING (parking)
	at jdk.internal.misc.Unsafe.park(java.base@17.0.9/Native Method)
	- parking to wait for  <0x0000000711e2> (a java.util.concurrent.CompletableFuture$Signaller)
	at java.util.concurrent.locks.LockSupport.parkNanos(java.base@17.0.9/LockSupport.java:252)
	at java.util.concurrent.CompletableFuture.timedGet(java.base@17.0.9/CompletableFuture.java:1939)
	at java.util.concurrent.CompletableFuture.get(java.base@17.0.9/CompletableFuture.java:2095)
	at NettyGateway$Handler.channelRead0(NettyGateway.java:173)
	at io.netty.channel.SimpleChannelInboundHandler.channelRead(SimpleChannelInboundHandler.java:99)

"a "quoted" name" #15 daemon prio=5 os_prio=0 cpu=1.00ms elapsed=9.00s tid=0x00007f3d nid=0x1a2c in Object.wait()  [0x00007f3a]
   java.lang.Thread.State: WAITING (on object monitor)
	at java.lang.Object.wait(java.base@17.0.9/Native Method)
	- waiting on <0x0000000712> (a java.lang.Object)

"VM Thread" os_prio=0 cpu=5.00ms elapsed=9.20s tid=0x00007f30 nid=0x1a00 runnable  

JNI global refs: 15, weak refs: 0
"#;

    #[test]
    fn hidden_class_addresses_are_cut() {
        assert_eq!(
            short_frame("com.x.JdkHttpGateway$$Lambda$16/0x00007f59d4005c08.handle(Unknown Source)"),
            "JdkHttpGateway$$Lambda$16.handle(Unknown Source)"
        );
        assert_eq!(short_frame("a.B.c(java.base@17/B.java:1)"), "B.c(B.java:1)");
    }

    #[test]
    fn threads_have_their_tid_state_and_short_frames() {
        let threads = parse(DUMP);
        assert_eq!(threads.len(), 3, "{threads:#?}");
        let nio = &threads[0];
        assert_eq!(nio.name, "reactor-http-nio-1");
        assert_eq!(nio.nid, 0x1a2b);
        assert_eq!(nio.state, "TIMED_WAITING (parking)");
        assert_eq!(
            nio.frames,
            [
                "Unsafe.park(Native Method)",
                "- parking to wait for CompletableFuture$Signaller",
                "LockSupport.parkNanos(LockSupport.java:252)",
                "CompletableFuture.timedGet(CompletableFuture.java:1939)",
                "CompletableFuture.get(CompletableFuture.java:2095)",
                "NettyGateway$Handler.channelRead0(NettyGateway.java:173)",
                "SimpleChannelInboundHandler.channelRead(SimpleChannelInboundHandler.java:99)",
            ]
        );
        assert_eq!(nio.java_frames().count(), 6);
        assert_eq!(threads[1].name, "a \"quoted\" name");
        assert_eq!(threads[1].frames[1], "- waiting on Object");
        assert_eq!((threads[2].name.as_str(), threads[2].nid, threads[2].state.as_str()), ("VM Thread", 0x1a00, ""));
        assert!(threads[2].frames.is_empty());
    }

    #[test]
    fn hostile_text_is_bounded_and_never_panics() {
        for text in [
            "",
            "\"",
            "\" nid=",
            "\" nid=0x",
            "\"x\" nid=0xzz",
            "\"é nid=0x1",
            "\tat ",
            "\"a\" nid=0x1\n\tat (\n\t- waiting on (a",
        ] {
            let _ = parse(text);
        }
        let many: String = (0..MAX_THREADS + 10).map(|i| format!("\"t{i}\" nid=0x{i:x}\n")).collect();
        assert_eq!(parse(&many).len(), MAX_THREADS);
        let deep = format!("\"t\" nid=0x1\n{}", "\tat a.B.c(B.java:1)\n".repeat(MAX_FRAMES * 2));
        assert_eq!(parse(&deep)[0].frames.len(), MAX_FRAMES);
        let long = format!("\"{}\" nid=0x1\n\tat {}(X.java:1)\n", "é".repeat(1000), "a.".repeat(1000));
        let thread = &parse(&long)[0];
        assert!(thread.name.len() <= MAX_TEXT && thread.frames[0].len() <= MAX_TEXT + 16, "{thread:?}");
    }
}
