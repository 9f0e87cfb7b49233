//! How a segment's bytes advance a [`Parser`]: unseen bytes skipped by count, whole runs (start
//! line, header lines, body) taken at once, and the per-byte state machine where a run ends or a
//! line is cut by the segment's end.

use super::{
    After, Cursor, Event, Parser, State, VERSION_PREFIX, find_lf, is_method_byte, is_tchar, is_version, push_lower,
};

impl Parser {
    /// Unseen bytes: skipped by count where the framing allows, otherwise sync is lost.
    pub(super) fn skip_unseen(&mut self, cur: &mut Cursor) -> Option<Event> {
        match self.state {
            State::Body(remaining) | State::ChunkData(remaining) => {
                let take = remaining.min(cur.gap);
                cur.gap -= take;
                self.body_bytes(remaining, take, cur)
            }
            State::UntilClose | State::Unknown => {
                self.count(std::mem::take(&mut cur.gap), cur);
                None
            }
            State::Held | State::Stopped => {
                cur.gap = 0;
                None
            }
            State::Idle => {
                // A message starts in the unseen bytes: nothing of it is known.
                self.begin(cur);
                None
            }
            State::ChunkSize { .. }
            | State::ChunkDataEnd { .. }
            | State::TrailerStart
            | State::TrailerLine
            | State::TrailerEnd => {
                self.lost_sync = self.lost_sync.saturating_add(1);
                self.state = State::Unknown;
                None
            }
            s if s.in_head() => {
                if self.start_reported {
                    Some(self.head_event(false))
                } else {
                    Some(self.start_event())
                }
            }
            // AwaitBody and EndNow are handled by `step`.
            _ => None,
        }
    }

    /// Walks visible bytes until an event.
    pub(super) fn consume(&mut self, cur: &mut Cursor) -> Option<Event> {
        while let Some((&b, rest)) = cur.vis.split_first() {
            match self.state {
                State::Body(remaining) | State::ChunkData(remaining) => {
                    let take = remaining.min(cur.vis.len() as u64);
                    cur.vis = cur.vis.get(usize::try_from(take).unwrap_or(usize::MAX)..).unwrap_or_default();
                    if let Some(end) = self.body_bytes(remaining, take, cur) {
                        return Some(end);
                    }
                }
                State::UntilClose | State::Unknown => {
                    self.count(cur.vis.len() as u64, cur);
                    cur.vis = &[];
                }
                State::Held | State::Stopped => cur.vis = &[],
                State::AwaitBody | State::EndNow(_) => return None,
                _ => {
                    if self.state == State::Idle && b != b'\r' && b != b'\n' {
                        // A message starts here: begun before the runs, so that its whole start
                        // line is taken in one go (`byte` would begin it and then walk it).
                        self.begin(cur);
                    }
                    let run = self.run(cur.vis);
                    if run > 0 {
                        cur.vis = cur.vis.get(run..).unwrap_or_default();
                        self.count(run as u64, cur);
                        continue;
                    }
                    cur.vis = rest;
                    if let Some(event) = self.byte(b, cur) {
                        return Some(event);
                    }
                }
            }
        }
        None
    }

    /// Takes, as one slice, a prefix of `vis` that [`Self::byte`] would walk without an event:
    /// whole header lines, a whole start line but its LF, the inside of a method, target,
    /// header name or value, reason phrase, folded or trailer line, or a whole `HTTP/1.x` at the
    /// start of a version. The bytes that end them are left to `byte`. Returns how many it took.
    fn run(&mut self, vis: &[u8]) -> usize {
        match self.state {
            State::LineStart => self.acc.header_lines(vis),
            State::Method if self.acc.method_len == 0 => match self.acc.request_line(vis) {
                0 => self.acc.method_run(vis),
                n => {
                    self.state = State::ReqLineEnd;
                    n
                }
            },
            State::RespVersion(0) => match self.acc.status_line(vis) {
                0 => self.version_run(vis),
                n => {
                    self.state = State::Reason;
                    n
                }
            },
            State::Method => self.acc.method_run(vis),
            State::Target => self.acc.target_run(vis),
            State::Name => self.acc.name_run(vis),
            State::Value => self.acc.value_run(vis),
            State::Reason | State::Fold | State::TrailerLine => find_lf(vis).unwrap_or(vis.len()),
            State::ReqVersion(0) => self.version_run(vis),
            _ => 0,
        }
    }

    /// A whole `HTTP/1.x` at the start of a version.
    fn version_run(&mut self, vis: &[u8]) -> usize {
        let Some(version) = vis.get(..VERSION_PREFIX.len() + 1) else { return 0 };
        if !is_version(version) {
            return 0;
        }
        self.state = match self.state {
            State::ReqVersion(_) => State::ReqLineEnd,
            _ => State::RespSpace,
        };
        version.len()
    }

    /// One byte of a start line, header block, chunk-size line or trailer.
    fn byte(&mut self, b: u8, cur: &Cursor) -> Option<Event> {
        if self.state == State::Idle {
            if b == b'\r' || b == b'\n' {
                return None;
            }
            self.begin(cur);
        }
        self.count(1, cur);
        let acc = &mut self.acc;
        match self.state {
            State::Method => match b {
                b' ' if acc.method_len > 0 => self.state = State::Target,
                _ if is_method_byte(b) => match acc.method.get_mut(usize::from(acc.method_len)) {
                    Some(slot) => {
                        *slot = b;
                        acc.method_len += 1;
                    }
                    None => return Some(self.not_http(cur)),
                },
                _ => return Some(self.not_http(cur)),
            },
            State::Target => match b {
                b' ' if acc.target_len > 0 => self.state = State::ReqVersion(0),
                0..=b' ' | 0x7f => return Some(self.not_http(cur)),
                _ => {
                    acc.target_len = acc.target_len.saturating_add(1);
                    if b == b'?' || b == b'#' {
                        acc.path_done = true;
                    } else if !acc.path_done {
                        match acc.path.get_mut(usize::from(acc.path_len)) {
                            Some(slot) => {
                                *slot = b;
                                acc.path_len += 1;
                            }
                            None => acc.path_done = true,
                        }
                    }
                }
            },
            State::ReqVersion(n) | State::RespVersion(n) => {
                let ok = match VERSION_PREFIX.get(usize::from(n)) {
                    Some(&expected) => b == expected,
                    None => b.is_ascii_digit(),
                };
                if !ok {
                    return Some(self.not_http(cur));
                }
                self.state = match (self.state, n) {
                    (State::ReqVersion(_), 7) => State::ReqLineEnd,
                    (State::ReqVersion(_), _) => State::ReqVersion(n + 1),
                    (_, 7) => State::RespSpace,
                    _ => State::RespVersion(n + 1),
                };
            }
            State::ReqLineEnd => match b {
                b'\r' => {}
                b'\n' => {
                    self.state = State::LineStart;
                    return Some(self.start_event());
                }
                _ => return Some(self.not_http(cur)),
            },
            State::RespSpace => match b {
                b' ' => self.state = State::StatusCode(0),
                _ => return Some(self.not_http(cur)),
            },
            State::StatusCode(n) if n < 3 => match b {
                b'0'..=b'9' => {
                    acc.status = acc.status * 10 + u16::from(b - b'0');
                    acc.status_digits = n + 1;
                    self.state = State::StatusCode(n + 1);
                    if n == 0 && b == b'0' {
                        return Some(self.not_http(cur));
                    }
                }
                _ => return Some(self.not_http(cur)),
            },
            State::StatusCode(_) => match b {
                b' ' | b'\r' => self.state = State::Reason,
                b'\n' => {
                    self.state = State::LineStart;
                    return Some(self.start_event());
                }
                _ => return Some(self.not_http(cur)),
            },
            State::Reason => {
                if b == b'\n' {
                    self.state = State::LineStart;
                    return Some(self.start_event());
                }
            }
            State::LineStart => match b {
                b'\r' => self.state = State::HeadEnd,
                b'\n' => return Some(self.head_event(true)),
                b' ' | b'\t' => self.state = State::Fold,
                _ if is_tchar(b) => {
                    acc.name_len = 0;
                    acc.name_overflow = false;
                    push_lower(&mut acc.name, &mut acc.name_len, &mut acc.name_overflow, b);
                    self.state = State::Name;
                }
                _ => return Some(self.not_http(cur)),
            },
            State::Name => match b {
                b':' => {
                    acc.header = acc.name_kind();
                    self.state = State::Value;
                }
                _ if is_tchar(b) => push_lower(&mut acc.name, &mut acc.name_len, &mut acc.name_overflow, b),
                _ => return Some(self.not_http(cur)),
            },
            State::Value => match b {
                b'\n' => {
                    acc.finish_value();
                    self.state = State::LineStart;
                }
                b'\r' => {}
                _ => acc.value_byte(b),
            },
            State::Fold => {
                if b == b'\n' {
                    self.state = State::LineStart;
                }
            }
            State::HeadEnd => match b {
                b'\n' => return Some(self.head_event(true)),
                _ => return Some(self.not_http(cur)),
            },
            State::ChunkSize { digits, value, ext } => match b {
                b'\n' if digits > 0 && value == 0 => self.state = State::TrailerStart,
                b'\n' if digits > 0 => self.state = State::ChunkData(value),
                b'\r' | b';' | b' ' | b'\t' if digits > 0 => self.state = State::ChunkSize { digits, value, ext: true },
                _ if ext && b != b'\n' => {}
                _ => match (b as char).to_digit(16).and_then(|d| value.checked_mul(16)?.checked_add(u64::from(d))) {
                    Some(value) => self.state = State::ChunkSize { digits: digits.saturating_add(1), value, ext },
                    None => self.lose_sync(),
                },
            },
            State::ChunkDataEnd { cr } => match b {
                b'\r' if !cr => self.state = State::ChunkDataEnd { cr: true },
                b'\n' => self.state = State::ChunkSize { digits: 0, value: 0, ext: false },
                _ => self.lose_sync(),
            },
            State::TrailerStart => match b {
                b'\r' => self.state = State::TrailerEnd,
                b'\n' => return Some(self.end(cur.ts_ns, After::Idle)),
                _ => self.state = State::TrailerLine,
            },
            State::TrailerLine => {
                if b == b'\n' {
                    self.state = State::TrailerStart;
                }
            }
            State::TrailerEnd => match b {
                b'\n' => return Some(self.end(cur.ts_ns, After::Idle)),
                _ => self.state = State::TrailerLine,
            },
            // Handled in `consume` / `step`.
            State::Idle
            | State::AwaitBody
            | State::EndNow(_)
            | State::Body(_)
            | State::ChunkData(_)
            | State::UntilClose
            | State::Unknown
            | State::Held
            | State::Stopped => {}
        }
        None
    }

    fn lose_sync(&mut self) {
        self.lost_sync = self.lost_sync.saturating_add(1);
        self.state = State::Unknown;
    }

    /// `take` of the `remaining` bytes of a body or chunk went by (seen or not): the message ends
    /// with the last byte of a length-framed body; a chunk goes on to its CRLF.
    fn body_bytes(&mut self, remaining: u64, take: u64, cur: &Cursor) -> Option<Event> {
        self.count(take, cur);
        self.state = match (self.state, remaining - take) {
            (State::Body(_), 0) => return Some(self.end(cur.ts_ns, After::Idle)),
            (State::Body(_), n) => State::Body(n),
            (_, 0) => State::ChunkDataEnd { cr: false },
            (_, n) => State::ChunkData(n),
        };
        None
    }
}
