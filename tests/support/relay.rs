//! A TCP relay between two processes of the engine, to partition them: the coordinator reaches
//! a worker through it (`scripts/db route NODE PORT`), and the relay then passes bytes
//! ([`Link::Up`]), holds them with every connection left open ([`Link::BlackHole`]: nothing
//! answered, nothing refused, as a dropped route or a firewall that drops packets), or resets
//! every connection and each new one ([`Link::Reset`]: as a peer that restarted or a firewall
//! that rejects). Bytes held while black-holed go on when the link is up again.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    Up,
    BlackHole,
    Reset,
}

pub struct Relay {
    port: u16,
    link: watch::Sender<Link>,
    task: JoinHandle<()>,
}

impl Relay {
    /// A relay on a free port of this host to `upstream` on it, up.
    pub async fn start(upstream: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let port = listener.local_addr().unwrap().port();
        let (link, rx) = watch::channel(Link::Up);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(connection(client, upstream, rx.clone()));
            }
        });
        Relay { port, link, task }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

impl Drop for Relay {
    /// Stops accepting; open connections see the sender gone and reset.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits while the link is black-holed: `true` once it is up, `false` on a reset.
async fn until_up(link: &mut watch::Receiver<Link>) -> bool {
    loop {
        match *link.borrow_and_update() {
            Link::Up => return true,
            Link::Reset => return false,
            Link::BlackHole => {}
        }
        if link.changed().await.is_err() {
            return false;
        }
    }
}

/// Returns when the link is reset (or the relay is gone).
async fn until_reset(link: &mut watch::Receiver<Link>) {
    loop {
        if *link.borrow_and_update() == Link::Reset {
            return;
        }
        if link.changed().await.is_err() {
            return;
        }
    }
}

async fn connection(client: TcpStream, upstream: u16, mut link: watch::Receiver<Link>) {
    // A connection made while black-holed is accepted and waits, as a SYN answered by a
    // middlebox would; made while reset, it is reset.
    if !until_up(&mut link).await {
        return reset(&client);
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return reset(&client);
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    tokio::select! {
        _ = pump(&mut cr, &mut sw, link.clone()) => {}
        _ = pump(&mut sr, &mut cw, link.clone()) => {}
    }
    if *link.borrow() != Link::Up {
        reset(cw.as_ref());
        reset(sw.as_ref());
    }
}

/// Copies `from` to `to` while the link is up; holds what it read while it is black-holed;
/// ends at a reset or when either side closes.
async fn pump(from: &mut OwnedReadHalf, to: &mut OwnedWriteHalf, mut link: watch::Receiver<Link>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            n = from.read(&mut buf) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            () = until_reset(&mut link) => return,
        };
        if !until_up(&mut link).await || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Closes `stream` with a reset (RST) rather than an orderly close, when it is dropped.
fn reset(stream: &TcpStream) {
    #[allow(deprecated)] // `set_zero_linger` is tokio 1.48's name; the MSRV's tokio has this one
    let _ = stream.set_linger(Some(Duration::ZERO));
}
