//! A client connection's byte stream: plain TCP, TLS over it, or a pipe
//! in memory (an in-process client's: the simulator's, see `memory`).
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

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_rustls::server::TlsStream;

type Tls = TlsStream<TcpStream>;

/// Bytes in the clear, under TLS or in memory: reads and writes go to
/// whichever it is.
pub enum Either<P, T, M = DuplexStream> {
    /// Plain TCP (or its half).
    Plain(P),
    /// TLS (or its half).
    Tls(T),
    /// A pipe in memory (or its half).
    Memory(M),
}

/// An accepted client connection.
pub type ClientStream = Either<TcpStream, Box<Tls>, DuplexStream>;
/// The reading half of a [`ClientStream`].
pub type ReadHalf =
    Either<OwnedReadHalf, tokio::io::ReadHalf<Box<Tls>>, tokio::io::ReadHalf<DuplexStream>>;
/// The writing half of a [`ClientStream`].
pub type WriteHalf =
    Either<OwnedWriteHalf, tokio::io::WriteHalf<Box<Tls>>, tokio::io::WriteHalf<DuplexStream>>;

impl ClientStream {
    fn tcp(&self) -> io::Result<&TcpStream> {
        match self {
            Either::Plain(s) => Ok(s),
            Either::Tls(s) => Ok(s.get_ref().0),
            Either::Memory(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "an in-memory connection has no address",
            )),
        }
    }

    /// The client's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp()?.peer_addr()
    }

    /// Our end's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp()?.local_addr()
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
            Either::Memory(s) => {
                let (r, w) = tokio::io::split(s);
                (Either::Memory(r), Either::Memory(w))
            }
        }
    }
}

impl<P: AsyncRead + Unpin, T: AsyncRead + Unpin, M: AsyncRead + Unpin> AsyncRead
    for Either<P, T, M>
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain(r) => Pin::new(r).poll_read(cx, buf),
            Either::Tls(r) => Pin::new(r).poll_read(cx, buf),
            Either::Memory(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl<P: AsyncWrite + Unpin, T: AsyncWrite + Unpin, M: AsyncWrite + Unpin> AsyncWrite
    for Either<P, T, M>
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Either::Plain(w) => Pin::new(w).poll_write(cx, buf),
            Either::Tls(w) => Pin::new(w).poll_write(cx, buf),
            Either::Memory(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain(w) => Pin::new(w).poll_flush(cx),
            Either::Tls(w) => Pin::new(w).poll_flush(cx),
            Either::Memory(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain(w) => Pin::new(w).poll_shutdown(cx),
            Either::Tls(w) => Pin::new(w).poll_shutdown(cx),
            Either::Memory(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}
