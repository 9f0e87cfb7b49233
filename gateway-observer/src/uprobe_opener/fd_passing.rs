//! One message and at most one file descriptor over a `SOCK_SEQPACKET` Unix socket
//! (`SCM_RIGHTS`): the helper's requests (the library's fd) and answers (the event's fd).

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
};

/// Room for the control message of one fd, aligned as `cmsghdr` needs.
#[repr(C, align(8))]
struct Control([u8; 32]);

pub fn send(socket: BorrowedFd<'_>, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    let mut control = Control([0; 32]);
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        let raw = fd.as_raw_fd();
        // SAFETY: CMSG_SPACE of one int fits `control` (24 bytes of 32); CMSG_FIRSTHDR of a
        // msghdr whose control buffer is that large is non-null and writable.
        unsafe {
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize;
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), raw);
        }
    }
    loop {
        // SAFETY: `msg` points at live buffers; MSG_NOSIGNAL: a gone peer is an error, not a signal.
        let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return if sent as usize == bytes.len() { Ok(()) } else { Err(io::ErrorKind::WriteZero.into()) };
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Receives one message into `buf`: its length (0 when the peer is gone) and the fd it carried.
pub fn recv(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = Control([0; 32]);
    // SAFETY: as in `send`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len();
    let received = loop {
        // SAFETY: `msg` points at live buffers of the lengths it states.
        let received = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if received >= 0 {
            break received as usize;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    let mut passed = Vec::new();
    // SAFETY: the kernel filled `control` up to msg_controllen; the CMSG_* walk stays inside it,
    // and each SCM_RIGHTS payload holds (len - CMSG_LEN(0)) / 4 fds this process now owns.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*header).cmsg_len - libc::CMSG_LEN(0) as usize) / size_of::<libc::c_int>();
                for i in 0..count {
                    let raw = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>().add(i));
                    passed.push(OwnedFd::from_raw_fd(raw));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    // More than one fd (or a truncated message) is not ours to keep: dropping closes them.
    let fd = if passed.len() == 1 && msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) == 0 {
        passed.pop()
    } else {
        None
    };
    Ok((received, fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::{fd::AsFd as _, unix::net::UnixDatagram};

    #[test]
    fn a_message_carries_its_fd_across() {
        let (a, b) = UnixDatagram::pair().expect("socketpair");
        let file = std::fs::File::open("/proc/self/exe").expect("open own binary");
        send(a.as_fd(), b"hello", Some(file.as_fd())).expect("send");
        let mut buf = [0u8; 16];
        let (n, fd) = recv(b.as_fd(), &mut buf).expect("recv");
        assert_eq!(&buf[..n], b"hello");
        let fd = fd.expect("an fd came across");
        let same = |fd: i32| std::fs::read_link(format!("/proc/self/fd/{fd}")).expect("readlink");
        assert_eq!(same(fd.as_raw_fd()), same(file.as_raw_fd()));
        assert_ne!(fd.as_raw_fd(), file.as_raw_fd());
        send(a.as_fd(), b"bye", None).expect("send without fd");
        let (n, fd) = recv(b.as_fd(), &mut buf).expect("recv");
        assert_eq!((&buf[..n], fd.is_none()), (&b"bye"[..], true));
    }
}
