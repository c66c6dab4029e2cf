//! A proxy between clients and PostgreSQL that loses answers after the server
//! committed them: the fault of a network that drops a connection at the worst
//! moment, made on cue.
//!
//! A connection told to lose an answer forwards nothing more to its client from
//! that point; when the server then says it is ready for the next query outside
//! any transaction (what was sent has committed), the proxy closes both sides.
//! Inside a transaction it stays silent until the client gives up. Every other
//! connection, every byte before the cue, and every connection's start
//! (authentication, up to the first ready-for-query) pass unchanged, and so do
//! the messages the server sends unasked (notifications, notices): a cue waits
//! for an answer. Two cues: the
//! first data row holding a marker ([`LosingProxy::start`]), for a test that
//! loses one chosen answer, and "the next answer the server sends on any
//! connection" ([`LosingProxy::lose_next`]), for a storm. The proxy reads the
//! server's messages (a type byte and a length), so clients must not ask for
//! TLS ([`LosingProxy::options`] and [`LosingProxy::url`] turn it off).

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use sqlx::postgres::{PgConnectOptions, PgSslMode};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream, UnixStream},
    task::JoinHandle,
};

/// Where the proxy connects: the server of some connect options.
#[derive(Clone)]
enum Upstream {
    Tcp(String, u16),
    Unix(PathBuf),
}

/// A running proxy; it stops when dropped.
pub struct LosingProxy {
    port: u16,
    lost: Arc<AtomicUsize>,
    cue: Arc<Cue>,
    task: JoinHandle<()>,
}

/// What the connections of one proxy share.
struct Cue {
    /// Lose the first answer whose data row holds it (empty: none).
    marker: Vec<u8>,
    /// Only an answer whose one and only data row holds the marker: not a
    /// driver's own lookup that lists the same value among others.
    alone: bool,
    /// Marked answers still to lose (one, unless [`LosingProxy::start_alone_times`]
    /// says more); each connection that loses one takes one off.
    armed: AtomicUsize,
    /// Answers still to lose, each the next one any connection's server sends.
    next: AtomicUsize,
    lost: Arc<AtomicUsize>,
}

impl LosingProxy {
    /// Starts a proxy on a free local port to the server `server` names; the
    /// first answer with a data row message holding `marker` (bytes of the
    /// message, its type byte included) is lost; none when it is empty.
    pub async fn start(server: &PgConnectOptions, marker: &[u8]) -> Self {
        Self::start_with(server, marker, false, 1).await
    }

    /// [`LosingProxy::start`] losing the first `times` answers holding
    /// `marker`, not only the first: a write's answer, then the answers of the
    /// lookups that ask whether it landed, when they carry the same row.
    pub async fn start_times(server: &PgConnectOptions, marker: &[u8], times: usize) -> Self {
        Self::start_with(server, marker, false, times).await
    }

    /// [`LosingProxy::start`] for an answer of one data row holding `marker`:
    /// for a value a driver's own lookups also send among others (sqlx lists an
    /// enum's labels, one row each, the first time a connection meets its type).
    pub async fn start_alone(server: &PgConnectOptions, marker: &[u8]) -> Self {
        Self::start_with(server, marker, true, 1).await
    }

    /// [`LosingProxy::start_alone`] losing the first `times` such answers.
    pub async fn start_alone_times(server: &PgConnectOptions, marker: &[u8], times: usize) -> Self {
        Self::start_with(server, marker, true, times).await
    }

    async fn start_with(
        server: &PgConnectOptions,
        marker: &[u8],
        alone: bool,
        times: usize,
    ) -> Self {
        let host = server.get_host().to_owned();
        let upstream = if host.starts_with('/') {
            Upstream::Unix(PathBuf::from(format!(
                "{host}/.s.PGSQL.{}",
                server.get_port()
            )))
        } else {
            Upstream::Tcp(host, server.get_port())
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("local address").port();
        let lost = Arc::new(AtomicUsize::new(0));
        let cue = Arc::new(Cue {
            marker: marker.to_vec(),
            alone,
            armed: AtomicUsize::new(if marker.is_empty() { 0 } else { times }),
            next: AtomicUsize::new(0),
            lost: lost.clone(),
        });
        let shared = cue.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, cue) = (upstream.clone(), shared.clone());
                tokio::spawn(async move {
                    match upstream {
                        Upstream::Tcp(host, port) => {
                            if let Ok(s) = TcpStream::connect((host.as_str(), port)).await {
                                relay(client, s, &cue).await;
                            }
                        }
                        Upstream::Unix(path) => {
                            if let Ok(s) = UnixStream::connect(path).await {
                                relay(client, s, &cue).await;
                            }
                        }
                    }
                });
            }
        });
        Self {
            port,
            lost,
            cue,
            task,
        }
    }

    /// `base` pointed at the proxy, without TLS.
    pub fn options(&self, base: &PgConnectOptions) -> PgConnectOptions {
        base.clone()
            .host("127.0.0.1")
            .port(self.port)
            .ssl_mode(PgSslMode::Disable)
    }

    /// `url` (a `postgres://` URL of the proxied server) pointed at the proxy,
    /// without TLS.
    pub fn url(&self, url: &str) -> String {
        let (head, query) = url.split_once('?').unwrap_or((url, ""));
        let (scheme, rest) = head.split_once("://").unwrap_or(("postgres", head));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
        let params: Vec<&str> = query
            .split('&')
            .filter(|p| !p.is_empty() && !p.starts_with("sslmode="))
            .chain(["sslmode=disable"])
            .collect();
        format!(
            "{scheme}://{}127.0.0.1:{}/{path}?{}",
            user.unwrap_or_default(),
            self.port,
            params.join("&")
        )
    }

    /// Makes the next answer the server sends, on whichever connection, lost.
    pub fn lose_next(&self) {
        self.cue.next.fetch_add(1, Ordering::SeqCst);
    }

    /// Answers lost so far.
    pub fn answers_lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for LosingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies the client's bytes to the server unchanged and the server's messages
/// back, until either side closes or the answer is lost.
async fn relay<S: AsyncRead + AsyncWrite + Unpin>(client: TcpStream, server: S, cue: &Cue) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = tokio::io::split(server);
    let to_server = tokio::io::copy(&mut client_rx, &mut server_tx);
    let to_client = answers(&mut server_rx, &mut client_tx, cue);
    tokio::select! {
        _ = to_server => {}
        _ = to_client => {}
    }
    // Dropping both halves of both sockets closes them.
}

impl Cue {
    /// Whether `msg` is a data row holding the armed marker.
    fn marks(&self, msg: &[u8]) -> bool {
        msg[0] == b'D'
            && self.armed.load(Ordering::SeqCst) > 0
            && msg.windows(self.marker.len()).any(|w| w == self.marker)
    }

    /// Takes one marked answer off the count; false when none is left.
    fn disarm_one(&self) -> bool {
        self.armed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Whether the answer that `msg`, a message of the server's, belongs to is
    /// to be lost from it on.
    ///
    /// A message the server sends on its own (a notification, a notice, a
    /// parameter's new value) belongs to no answer: losing from it on would
    /// leave a connection that only listens silent for good, with no commit to
    /// close it on, and the cue is kept for an answer.
    fn takes(&self, msg: &[u8]) -> bool {
        let marked = !self.alone && self.marks(msg) && self.disarm_one();
        let unasked = matches!(msg[0], b'A' | b'N' | b'S');
        marked
            || !unasked
                && self
                    .next
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
    }
}

/// Forwards the server's messages to the client whole, losing the rest of the
/// answer that holds the marker (see the module).
async fn answers(
    server: &mut (impl AsyncRead + Unpin),
    client: &mut (impl AsyncWrite + Unpin),
    cue: &Cue,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut losing = false;
    // Answers to queries only: the connection's start (authentication, the
    // server's parameters) ends with its first ready-for-query.
    let mut started = false;
    // A marked data row held back until the next message tells whether it is
    // its answer's only row (with `alone`), and the type of the message before.
    let mut held: Option<Vec<u8>> = None;
    let mut previous = 0u8;
    loop {
        let n = server.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        let mut at = 0;
        // A message: a type byte, then its length (counting itself) as an i32.
        while buf.len() >= at + 5 {
            let len = i32::from_be_bytes(buf[at + 1..at + 5].try_into().expect("4 bytes"));
            let end = at + 1 + usize::try_from(len).expect("a length PostgreSQL sent");
            if buf.len() < end {
                break;
            }
            let msg = &buf[at..end];
            if let Some(row) = held.take() {
                // The command's end right after it: the row was alone.
                if msg[0] == b'C' && cue.disarm_one() {
                    losing = true;
                } else {
                    out.extend_from_slice(&row);
                }
            }
            let first_row = previous != b'D';
            previous = msg[0];
            if started && !losing && cue.alone && first_row && cue.marks(msg) {
                held = Some(msg.to_vec());
                at = end;
                continue;
            }
            if started && !losing {
                losing = cue.takes(msg);
            }
            started |= msg[0] == b'Z';
            if !losing {
                out.extend_from_slice(msg);
            } else if msg[0] == b'Z' && msg.get(5) == Some(&b'I') {
                // Committed, and the client heard none of it.
                client.write_all(&out).await?;
                cue.lost.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            at = end;
        }
        buf.drain(..at);
        client.write_all(&out).await?;
    }
}
