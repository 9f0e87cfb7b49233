//! Sizes of the kernel maps and of what a record carries.

/// Bounds on the kernel maps.
pub const MAX_TARGETS: u32 = 1024;
/// Default number of thread slots (the daemon may size it at load: `max_threads`).
pub const MAX_THREADS: u32 = 16384;
/// Syscall numbers at or above this are not classified.
pub const MAX_SYSCALL_NR: u32 = 512;
/// `bpf_map_create` flag for an array userspace can mmap (reads with no syscall per element).
pub const BPF_F_MMAPABLE: u32 = 1 << 10;
pub const RINGBUF_BYTES: u32 = 256 * 1024;
/// Ring buffer of socket events (data and connections): at 10k requests/s a request's four data
/// events make about 25 MB/s, so this holds a good fraction of a second of them.
pub const SOCKET_RINGBUF_BYTES: u32 = 8 * 1024 * 1024;
/// TCP connections of targets followed at once.
pub const MAX_SOCKETS: u32 = 65536;
/// First bytes of each socket data syscall sent to userspace: enough for the request line and
/// headers of most requests and responses.
pub const DATA_HEAD_BYTES: usize = 512;
/// Last bytes of each data syscall: the end of a chunked body is found there.
pub const DATA_TAIL_BYTES: usize = 16;
/// Threads in `BLOCK_DETAIL`: event loops and the threads that end JVM pauses.
pub const MAX_BLOCK_DETAIL_THREADS: u32 = 4096;
/// HTTP/2 connections first seen mid-way that userspace may name to the kernel at once
/// (`H2_MARKS`); a mark lasts until the connection's next transfer, or a few seconds.
pub const MAX_H2_MARKS: u32 = 256;
/// Distinct user stacks kept for evidence.
pub const MAX_STACKS: u32 = 4096;

/// Buckets of the per-thread log2 histograms; the last one also holds everything larger
/// (2^38 ns, about 4.6 minutes, and up).
pub const THREAD_HIST_BUCKETS: usize = 40;
