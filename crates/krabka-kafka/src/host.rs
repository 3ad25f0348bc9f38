//! What the client and the service take from their host: TCP sockets and
//! random draws, in one place.
//!
//! Inside a turmoil simulation (feature `sim`, the simulation tier of
//! docs/development.md) both are the simulator's: sockets of its network,
//! whose links it cuts, slows and breaks, and draws from a generator the run
//! seeded ([`seed_draws`]), so that one seed decides one history. Everywhere
//! else, and in every build without the feature, they are the operating
//! system's; the feature changes nothing outside a simulation (a test binary
//! built with it still opens real sockets), so it is additive.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use rand::distr::uniform::{SampleRange, SampleUniform};
use rand::distr::{Distribution, StandardUniform};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A TCP connection: the operating system's, or a simulation's.
#[derive(Debug)]
pub struct Stream(StreamInner);

#[derive(Debug)]
enum StreamInner {
    Os(tokio::net::TcpStream),
    #[cfg(feature = "sim")]
    Sim(turmoil::net::TcpStream),
}

/// Opens a TCP connection to `addr` (`host:port`).
pub async fn connect(addr: &str) -> io::Result<Stream> {
    #[cfg(feature = "sim")]
    if turmoil::in_simulation() {
        let stream = turmoil::net::TcpStream::connect(addr).await?;
        return Ok(Stream(StreamInner::Sim(stream)));
    }
    let stream = tokio::net::TcpStream::connect(addr).await?;
    Ok(Stream(StreamInner::Os(stream)))
}

impl Stream {
    /// Sends small writes at once (a simulated stream always does).
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        match &self.0 {
            StreamInner::Os(s) => s.set_nodelay(nodelay),
            #[cfg(feature = "sim")]
            StreamInner::Sim(s) => s.set_nodelay(nodelay),
        }
    }

    /// Closes with a reset rather than a FIN, so the closed socket does not
    /// wait in TIME_WAIT for a minute holding its port (a connection opened
    /// for one request, many a second); a simulated stream has no such
    /// state.
    pub fn set_zero_linger(&self) -> io::Result<()> {
        match &self.0 {
            StreamInner::Os(s) => s.set_zero_linger(),
            #[cfg(feature = "sim")]
            StreamInner::Sim(_) => Ok(()),
        }
    }
}

impl From<tokio::net::TcpStream> for Stream {
    fn from(stream: tokio::net::TcpStream) -> Stream {
        Stream(StreamInner::Os(stream))
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            StreamInner::Os(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "sim")]
            StreamInner::Sim(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            StreamInner::Os(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "sim")]
            StreamInner::Sim(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            StreamInner::Os(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "sim")]
            StreamInner::Sim(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            StreamInner::Os(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(feature = "sim")]
            StreamInner::Sim(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// A listening TCP socket: the operating system's, or a simulation's.
pub struct Listener(ListenerInner);

enum ListenerInner {
    Os(tokio::net::TcpListener),
    #[cfg(feature = "sim")]
    Sim(turmoil::net::TcpListener),
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Listener")
            .field(&self.local_addr().ok())
            .finish()
    }
}

/// Listens on `addr`.
pub async fn bind(addr: SocketAddr) -> io::Result<Listener> {
    #[cfg(feature = "sim")]
    if turmoil::in_simulation() {
        let listener = turmoil::net::TcpListener::bind(addr).await?;
        return Ok(Listener(ListenerInner::Sim(listener)));
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    Ok(Listener(ListenerInner::Os(listener)))
}

impl Listener {
    /// The next connection, and its peer's address.
    pub async fn accept(&self) -> io::Result<(Stream, SocketAddr)> {
        match &self.0 {
            ListenerInner::Os(l) => {
                let (stream, peer) = l.accept().await?;
                Ok((Stream(StreamInner::Os(stream)), peer))
            }
            #[cfg(feature = "sim")]
            ListenerInner::Sim(l) => {
                let (stream, peer) = l.accept().await?;
                Ok((Stream(StreamInner::Sim(stream)), peer))
            }
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.0 {
            ListenerInner::Os(l) => l.local_addr(),
            #[cfg(feature = "sim")]
            ListenerInner::Sim(l) => l.local_addr(),
        }
    }
}

impl From<tokio::net::TcpListener> for Listener {
    fn from(listener: tokio::net::TcpListener) -> Listener {
        Listener(ListenerInner::Os(listener))
    }
}

#[cfg(feature = "sim")]
thread_local! {
    /// This thread's seeded generator, while a simulation runs on it (a
    /// turmoil simulation runs every host on the thread that steps it).
    static SEEDED: std::cell::RefCell<Option<rand::rngs::StdRng>> =
        const { std::cell::RefCell::new(None) };
}

/// From now on this thread's draws come from a generator seeded with
/// `seed` (`None`: the operating system's again). A simulation seeds them
/// before its first step.
#[cfg(feature = "sim")]
pub fn seed_draws(seed: Option<u64>) {
    use rand::SeedableRng;
    SEEDED.with(|s| *s.borrow_mut() = seed.map(rand::rngs::StdRng::seed_from_u64));
}

/// Runs `draw` on this thread's seeded generator, or on the operating
/// system's when none is seeded.
fn with_rng<T>(draw: impl FnOnce(&mut dyn rand::Rng) -> T) -> T {
    #[cfg(feature = "sim")]
    if SEEDED.with(|s| s.borrow().is_some()) {
        return SEEDED.with(|s| match s.borrow_mut().as_mut() {
            Some(rng) => draw(rng),
            None => draw(&mut rand::rng()),
        });
    }
    draw(&mut rand::rng())
}

/// A value drawn uniformly from `range` (jitter, a retirement share).
pub fn random_range<T, R>(range: R) -> T
where
    T: SampleUniform,
    R: SampleRange<T>,
{
    use rand::RngExt;
    with_rng(|rng| rng.random_range(range))
}

/// A value drawn from the whole of its type (a tie-break, an id prefix).
pub fn random<T>() -> T
where
    StandardUniform: Distribution<T>,
{
    use rand::RngExt;
    with_rng(|rng| rng.random())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn outside_a_simulation_the_sockets_are_the_hosts() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let addr = addr.to_string();
        let (connected, accepted) = tokio::join!(connect(&addr), listener.accept());
        let (mut client, mut server) = (connected.unwrap(), accepted.unwrap().0);
        client.set_nodelay(true).unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        client.write_all(b"ping").await.unwrap();
        let mut got = [0; 4];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
    }

    #[test]
    fn draws_stay_in_their_range() {
        for _ in 0..100 {
            let x: f64 = random_range(0.75..0.85);
            assert!((0.75..0.85).contains(&x));
        }
        let _: u32 = random();
    }

    #[cfg(feature = "sim")]
    #[test]
    fn seeded_draws_repeat_and_unseeded_ones_come_back() {
        let draw = || -> Vec<u32> { (0..8).map(|_| random_range(0..1_000_000)).collect() };
        seed_draws(Some(7));
        let first = draw();
        seed_draws(Some(7));
        assert_eq!(draw(), first);
        seed_draws(None);
        assert_ne!(draw(), first, "the operating system's again");
    }
}
