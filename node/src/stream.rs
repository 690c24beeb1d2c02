//! A client connection's byte stream: plain TCP or TLS over it.
//!
//! A task that reads and writes in turn (RESP) uses it whole; one that
//! has a reader task and a writer task (native) splits it into halves.
//! Plain TCP keeps tokio's lock-free owned halves; a TLS session is one
//! state for both directions, so its halves share it through
//! `tokio::io::split`, a lock taken on every read and write.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_rustls::server::TlsStream;

type Tls = TlsStream<TcpStream>;

/// An accepted client connection.
pub enum ClientStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS, its handshake done.
    Tls(Box<Tls>),
}

/// The reading half of a [`ClientStream`].
pub enum ReadHalf {
    /// Plain TCP.
    Plain(OwnedReadHalf),
    /// TLS.
    Tls(tokio::io::ReadHalf<Box<Tls>>),
}

/// The writing half of a [`ClientStream`].
pub enum WriteHalf {
    /// Plain TCP.
    Plain(OwnedWriteHalf),
    /// TLS.
    Tls(tokio::io::WriteHalf<Box<Tls>>),
}

impl ClientStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            ClientStream::Plain(s) => s,
            ClientStream::Tls(s) => s.get_ref().0,
        }
    }

    /// The client's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    /// Our end's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    /// The two halves.
    pub fn split(self) -> (ReadHalf, WriteHalf) {
        match self {
            ClientStream::Plain(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            ClientStream::Tls(s) => {
                let (r, w) = tokio::io::split(s);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ReadHalf::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Plain(w) => Pin::new(w).poll_write(cx, buf),
            WriteHalf::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(w) => Pin::new(w).poll_flush(cx),
            WriteHalf::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(w) => Pin::new(w).poll_shutdown(cx),
            WriteHalf::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}
