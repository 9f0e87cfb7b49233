//! `top`'s reading of an answer: any bytes as the HTTP/1.x response to its `GET` (the daemon's,
//! or whatever listens where `--connect` points), then the body as the API's JSON, into the types
//! `top` draws from, drawn on every screen. No panic; a body is never longer than the response it
//! came in; and the same bytes as a body a server framed (Content-Length, or chunked) are read
//! back whole.

#![no_main]

use gateway_observer::top::{
    app::{App, Key, Update},
    client::parse_response,
    model::Data,
    view,
};
use libfuzzer_sys::fuzz_target;
use ratatui::{Terminal, backend::TestBackend};

fuzz_target!(|bytes: &[u8]| {
    framed_bodies_read_back(bytes);
    let Ok((_status, body)) = parse_response(bytes) else { return };
    assert!(body.len() <= bytes.len(), "a body of {} bytes from {} bytes", body.len(), bytes.len());
    // The same body as both endpoints' answer: the snapshot's and the alerts' types in one go.
    let Ok(data) = Data::parse(&body, &body) else { return };
    let mut app = App::new("http://127.0.0.1:9464");
    app.apply(Update::Data(Box::new(data)));
    let Ok(mut terminal) = Terminal::new(TestBackend::new(80, 24)) else { return };
    for screen in ['1', '2', '3', '4', '5'] {
        app.on_key(Key::Char(screen));
        app.on_key(Key::Enter);
        let _ = terminal.draw(|frame| view::draw(frame, &app));
    }
});

fn framed_bodies_read_back(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    let mut sized = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", bytes.len()).into_bytes();
    sized.extend_from_slice(bytes);
    assert_eq!(parse_response(&sized), Ok((200, text.to_owned())), "Content-Length");
    // Chunks of 7 bytes split characters too; the body is whole again once joined.
    let mut chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for chunk in bytes.chunks(7) {
        chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        chunked.extend_from_slice(chunk);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(parse_response(&chunked), Ok((200, text.to_owned())), "chunked");
}
