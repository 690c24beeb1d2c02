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

/// Bytes in the clear or under TLS: reads and writes go to whichever it is.
pub enum Either<P, T> {
    /// Plain TCP (or its half).
    Plain(P),
    /// TLS (or its half).
    Tls(T),
}

/// An accepted client connection.
pub type ClientStream = Either<TcpStream, Box<Tls>>;
/// The reading half of a [`ClientStream`].
pub type ReadHalf = Either<OwnedReadHalf, tokio::io::ReadHalf<Box<Tls>>>;
/// The writing half of a [`ClientStream`].
pub type WriteHalf = Either<OwnedWriteHalf, tokio::io::WriteHalf<Box<Tls>>>;

impl ClientStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Either::Plain(s) => s,
            Either::Tls(s) => s.get_ref().0,
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
            Either::Plain(s) => {
                let (r, w) = s.into_split();
                (Either::Plain(r), Either::Plain(w))
            }
            Either::Tls(s) => {
                let (r, w) = tokio::io::split(s);
                (Either::Tls(r), Either::Tls(w))
            }
        }
    }
}

impl<P: AsyncRead + Unpin, T: AsyncRead + Unpin> AsyncRead for Either<P, T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain(r) => Pin::new(r).poll_read(cx, buf),
            Either::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl<P: AsyncWrite + Unpin, T: AsyncWrite + Unpin> AsyncWrite for Either<P, T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Either::Plain(w) => Pin::new(w).poll_write(cx, buf),
            Either::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain(w) => Pin::new(w).poll_flush(cx),
            Either::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain(w) => Pin::new(w).poll_shutdown(cx),
            Either::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}
