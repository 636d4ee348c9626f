//! Datagrams with the local address they arrived on (`IP_PKTINFO`,
//! `IPV6_RECVPKTINFO`), and replies sent from that same address.
//!
//! A filter bound to a wildcard address answers on every address of the
//! host: a steered answer names the address the question came to, and the
//! reply must come from it too, or the client's resolver drops it.

use nix::sys::socket::{
    recvmsg, sendmsg, setsockopt, sockopt, ControlMessage, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// A UDP socket that reports where each datagram arrived.
pub(super) struct ArrivalSocket {
    socket: UdpSocket,
    /// The socket's own address when it is a specific one (then no
    /// control messages are needed).
    fixed: Option<IpAddr>,
}

/// One datagram received.
pub(super) struct Received {
    /// Bytes in the buffer.
    pub(super) len: usize,
    /// Who sent it.
    pub(super) source: SocketAddr,
    /// The local address it was sent to.
    pub(super) arrived: IpAddr,
}

impl ArrivalSocket {
    /// Wraps `socket`, asking the kernel for arrival addresses when it is
    /// bound to a wildcard address.
    pub(super) fn new(socket: UdpSocket) -> io::Result<Self> {
        let local = socket.local_addr()?.ip();
        if !local.is_unspecified() {
            return Ok(ArrivalSocket {
                socket,
                fixed: Some(local),
            });
        }
        match local {
            IpAddr::V4(_) => setsockopt(&socket, sockopt::Ipv4PacketInfo, &true)?,
            IpAddr::V6(_) => {
                setsockopt(&socket, sockopt::Ipv6RecvPacketInfo, &true)?;
                // IPv4 datagrams on a dual-stack socket report IP_PKTINFO.
                let _ = setsockopt(&socket, sockopt::Ipv4PacketInfo, &true);
            }
        }
        Ok(ArrivalSocket { socket, fixed: None })
    }

    /// Receives one datagram into `buf`.
    pub(super) fn receive(&self, buf: &mut [u8]) -> io::Result<Received> {
        if let Some(arrived) = self.fixed {
            let (len, source) = self.socket.recv_from(buf)?;
            return Ok(Received { len, source, arrived });
        }
        let mut space = nix::cmsg_space!(libc::in_pktinfo, libc::in6_pktinfo);
        let mut iov = [IoSliceMut::new(buf)];
        let message =
            recvmsg::<SockaddrStorage>(self.socket.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::empty())?;
        let source = message
            .address
            .and_then(|address| socket_addr(&address))
            .ok_or_else(|| io::Error::other("datagram without a source address"))?;
        let mut arrived = None;
        for cmsg in message.cmsgs()? {
            match cmsg {
                ControlMessageOwned::Ipv4PacketInfo(info) => {
                    arrived = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr))));
                }
                ControlMessageOwned::Ipv6PacketInfo(info) => {
                    arrived = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
                }
                _ => {}
            }
        }
        let arrived = arrived.ok_or_else(|| io::Error::other("datagram without its arrival address"))?;
        Ok(Received {
            len: message.bytes,
            source,
            arrived,
        })
    }

    /// Sends `reply` to `to` from the local address `from`.
    pub(super) fn reply(&self, reply: &[u8], to: SocketAddr, from: IpAddr) -> io::Result<()> {
        if self.fixed.is_some() {
            return self.socket.send_to(reply, to).map(drop);
        }
        let iov = [IoSlice::new(reply)];
        let fd = self.socket.as_raw_fd();
        let from = crackbox_policy::canonical_ip(from);
        match (to, from) {
            (SocketAddr::V4(to), IpAddr::V4(from)) => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(from).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                let cmsg = [ControlMessage::Ipv4PacketInfo(&info)];
                sendmsg(fd, &iov, &cmsg, MsgFlags::empty(), Some(&SockaddrStorage::from(to)))?;
            }
            (SocketAddr::V6(to), from) => {
                let from = match from {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr { s6_addr: from.octets() },
                    ipi6_ifindex: 0,
                };
                let cmsg = [ControlMessage::Ipv6PacketInfo(&info)];
                sendmsg(fd, &iov, &cmsg, MsgFlags::empty(), Some(&SockaddrStorage::from(to)))?;
            }
            (SocketAddr::V4(to), IpAddr::V6(_)) => {
                self.socket.send_to(reply, to)?;
            }
        }
        Ok(())
    }
}

fn socket_addr(address: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = address.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::new(v4.ip(), v4.port())));
    }
    address
        .as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::new(v6.ip(), v6.port(), v6.flowinfo(), v6.scope_id())))
}
