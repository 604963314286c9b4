//! The virtio port against Sluice's own `vhost` port in this process, and
//! against a backend made of [`Backend`] that writes bad used entries:
//! frames cross both ways byte for byte, long frames as chains, each queue
//! pair on its own rings, the backend goes and comes back, bad input is
//! counted, and every buffer is home at the end.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::driver::open;
use crate::mbuf::{Burst, Mbuf, MbufPool};
use crate::port::{Port, PortConfig};
use crate::test_support::frames::{test_frame, test_frames};
use crate::test_support::{TestPool, assert_pool_full};
use crate::vhost_user::{Backend, BackendConfig, ReadyVring, VringHandler, protocol_features};
use crate::virtio::{VIRTIO_F_IN_ORDER, VIRTIO_F_VERSION_1, VIRTIO_NET_F_MRG_RXBUF, feature};

/// A socket path of this test process, unused so far.
fn socket_path() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "sluice-virtio-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    // A socket file there is an earlier process's that had this one's id
    // (a test that failed before removing its own): binding over it would
    // fail with the address in use.
    let _ = std::fs::remove_file(&path);
    path
}

/// A shared pool: a hugetlbfs memfd when hugepages are reserved, a plain
/// memfd otherwise; the `vhost` port maps either.
fn shared_pool(size: u32) -> MbufPool {
    TestPool::new(size).build_shared()
}

fn port(spec: &str, pool: &MbufPool, queues: u16) -> Port {
    let mut config = PortConfig::new(Some(pool.clone()))
        .queues(queues, queues)
        .nb_rxd(256)
        .nb_txd(256);
    config.mtu = 9000;
    open(spec, config).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// A started `vhost` port listening at `path` and a started `virtio` port
/// connected to it, both on `pool`.
fn pair(path: &Path, pool: &MbufPool, queues: u16) -> (Port, Port) {
    let mut vhost = port(
        &format!("vhost:path={},queues={queues}", path.display()),
        pool,
        queues,
    );
    vhost.start().unwrap();
    let mut virtio = port(
        &format!("virtio:path={},queues={queues}", path.display()),
        pool,
        queues,
    );
    virtio.start().unwrap();
    (vhost, virtio)
}

/// The port's xstat `name`.
fn xstat(port: &Port, name: &str) -> u64 {
    port.xstats()
        .into_iter()
        .find(|(n, _)| n == name)
        .map_or_else(|| panic!("no xstat {name}"), |(_, v)| v)
}

/// Waits, up to 10 s, until `done` holds.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Sends `frames` from `from`'s queue `q`, a burst at a time, polling
/// `to`'s queue `q` in between; returns what `to` received, in order.
/// Bounded: a number of rounds for each frame.
fn send(from: &mut Port, to: &mut Port, q: usize, frames: Vec<Mbuf>) -> Vec<Vec<u8>> {
    let mut out: Burst = Burst::new();
    let mut got = Vec::new();
    let count = frames.len();
    let mut pending = frames.into_iter();
    let mut rx: Burst = Burst::new();
    // The receiving queue posts its buffers at its first poll.
    to.rx_queue(q).unwrap().rx_burst(&mut rx);
    got.extend(rx.iter().map(|m| m.to_vec()));
    rx.clear();
    for _ in 0..count * 4 + 64 {
        while out.free() > 0 {
            match pending.next() {
                Some(m) => {
                    let _ = out.push(m);
                }
                None => break,
            }
        }
        from.tx_queue(q).unwrap().tx_burst(&mut out);
        to.rx_queue(q).unwrap().rx_burst(&mut rx);
        got.extend(rx.iter().map(|m| m.to_vec()));
        rx.clear();
        if got.len() >= count && out.is_empty() {
            break;
        }
    }
    got
}

/// `bytes` in a chain of mbufs of at most 1000 bytes each.
fn chained(pool: &MbufPool, bytes: &[u8]) -> Mbuf {
    let mut pieces = bytes
        .chunks(1000)
        .map(|c| pool.alloc_from_slice(c).unwrap());
    let mut head = pieces.next().unwrap();
    for seg in pieces {
        head.chain(seg).map_err(|(e, _)| e).unwrap();
    }
    head
}

fn mbufs(pool: &MbufPool, frames: &[Vec<u8>]) -> Vec<Mbuf> {
    frames
        .iter()
        .map(|f| pool.alloc_from_slice(f).unwrap())
        .collect()
}

#[test]
fn frames_cross_both_ways_byte_exact() {
    let pool = shared_pool(2047);
    let path = socket_path();
    let (mut vhost, mut virtio) = pair(&path, &pool, 1);
    assert_eq!(xstat(&virtio, "link_ups"), 1);

    let out = test_frames([2; 6], 1, 0, 500, 7);
    let sent = mbufs(&pool, &out);
    assert_eq!(
        send(&mut virtio, &mut vhost, 0, sent),
        out,
        "virtio to vhost"
    );
    // Clones cannot take the header in their headroom: it comes from the
    // ring memory.
    let sent = mbufs(&pool, &out);
    let clones = sent.iter().map(|m| m.try_clone().unwrap()).collect();
    assert_eq!(send(&mut virtio, &mut vhost, 0, clones), out, "clones");
    drop(sent);
    let back = test_frames([2; 6], 2, 1000, 500, 11);
    let sent = mbufs(&pool, &back);
    assert_eq!(
        send(&mut vhost, &mut virtio, 0, sent),
        back,
        "vhost to virtio"
    );

    let stats = virtio.stats();
    assert_eq!((stats.tx_packets, stats.rx_packets), (1000, 500));
    assert_eq!(stats.rx_errors + stats.tx_errors, 0);
    for name in [
        "rx_bad_used_id_errors",
        "rx_bad_used_length_errors",
        "tx_bad_used_id_errors",
        "rx_ring_errors",
        "tx_ring_errors",
        "tx_not_ready_errors",
    ] {
        assert_eq!(xstat(&virtio, name), 0, "{name}");
    }
    // The vhost port polls: the rings ask for a kick only as the avail
    // index first passes the event index the port never moves.
    assert!(xstat(&virtio, "rx_kicks") <= 1);
    assert!(xstat(&virtio, "tx_kicks") <= 1);
    // The Rx ring's buffers and the Tx packets not yet reclaimed are the
    // port's until it stops.
    let held = 2047 - pool.available();
    assert!(held >= 256, "{held} held");
    virtio.stop();
    vhost.stop();
    assert_pool_full(&pool);
}

#[test]
fn frames_from_a_private_pool_are_copied_and_cross() {
    let pool = shared_pool(1023);
    let private = TestPool::new(255).name("private").build();
    let path = socket_path();
    let (mut vhost, mut virtio) = pair(&path, &pool, 1);
    let out = test_frames([2; 6], 3, 0, 100, 13);
    let sent = mbufs(&private, &out);
    assert_eq!(send(&mut virtio, &mut vhost, 0, sent), out);
    drop((virtio, vhost));
    assert_pool_full(&pool);
    assert_pool_full(&private);
}

#[test]
fn a_long_frame_crosses_as_a_chain_both_ways() {
    let pool = shared_pool(1023);
    let path = socket_path();
    let (mut vhost, mut virtio) = pair(&path, &pool, 1);
    let frame = test_frame([2; 6], 4, 7, 5000);
    let sent = vec![chained(&pool, &frame)];
    assert_eq!(sent[0].nb_segs(), 5);
    assert_eq!(
        send(&mut virtio, &mut vhost, 0, sent),
        std::slice::from_ref(&frame),
        "a chain of mbufs as a descriptor chain"
    );
    let mut rx: Burst = Burst::new();
    virtio.rx_queue(0).unwrap().rx_burst(&mut rx);
    let mut out: Burst = Burst::new();
    out.push(chained(&pool, &frame)).unwrap();
    assert_eq!(vhost.tx_queue(0).unwrap().tx_burst(&mut out), 1);
    assert_eq!(virtio.rx_queue(0).unwrap().rx_burst(&mut rx), 1);
    let m = rx.pop().unwrap();
    assert_eq!(m.nb_segs(), 3, "2048-byte buffers, merged");
    assert_eq!(m.to_vec(), frame);
    drop((m, rx, out));
    drop((virtio, vhost));
    assert_pool_full(&pool);
}

#[test]
fn an_rx_pool_smaller_than_the_ring_runs_dry_and_every_frame_still_crosses() {
    let pool = shared_pool(2047);
    // 100 buffers for a 256-entry ring: it is never full; each frame fits
    // in one buffer.
    let small = TestPool::new(100).name("small").build_shared();
    let path = socket_path();
    let mut vhost = port(&format!("vhost:path={}", path.display()), &pool, 1);
    vhost.start().unwrap();
    let mut virtio = port(&format!("virtio:path={}", path.display()), &small, 1);
    virtio.start().unwrap();
    let frames = test_frames([2; 6], 5, 0, 400, 37);
    let sent = mbufs(&pool, &frames);
    let got = send(&mut vhost, &mut virtio, 0, sent);
    assert!(got == frames, "every frame, in order, byte for byte");
    let stats = virtio.stats();
    assert_eq!(stats.rx_packets, 400);
    assert_eq!(stats.rx_errors, 0);
    assert!(stats.rx_nombuf > 0, "the ring ran dry: {stats:?}");
    virtio.stop();
    vhost.stop();
    drop((virtio, vhost));
    assert_pool_full(&pool);
    assert_pool_full(&small);
}

#[test]
fn a_slot_is_held_by_one_side_at_a_time_and_control_gets_it_from_a_busy_queue() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use super::queue::VringSlot;

    let slot = Arc::new(VringSlot::new());
    let holders = Arc::new(AtomicU32::new(0));
    let done = Arc::new(AtomicBool::new(false));
    // Whoever holds the slot finds nobody else inside.
    let enter = |holders: &AtomicU32| assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0);
    let leave = |holders: &AtomicU32| holders.fetch_sub(1, Ordering::SeqCst);
    let queue = std::thread::spawn({
        let (slot, holders, done) = (Arc::clone(&slot), Arc::clone(&holders), Arc::clone(&done));
        move || {
            // Bounded: the control side below ends long before.
            for _ in 0..200_000_000u64 {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                if let Some(guard) = slot.enter() {
                    enter(&holders);
                    assert!(guard.is_none());
                    leave(&holders);
                }
            }
        }
    });
    for _ in 0..2000 {
        let guard = slot.control();
        enter(&holders);
        assert!(slot.enter().is_none(), "the queue is shut out meanwhile");
        leave(&holders);
        drop(guard);
    }
    done.store(true, Ordering::Relaxed);
    queue.join().unwrap();
    // Given back: the queue claims it again.
    assert!(slot.enter().is_some());
}

#[test]
fn each_queue_pair_has_its_own_rings() {
    let pool = shared_pool(2047);
    let path = socket_path();
    let (mut vhost, mut virtio) = pair(&path, &pool, 2);
    for q in 0..2 {
        let out = test_frames([2; 6], 10 + q as u8, 0, 40, 17);
        let sent = mbufs(&pool, &out);
        assert_eq!(send(&mut virtio, &mut vhost, q, sent), out, "queue {q} out");
        let sent = mbufs(&pool, &out);
        assert_eq!(
            send(&mut vhost, &mut virtio, q, sent),
            out,
            "queue {q} back"
        );
    }
    let stats = virtio.stats();
    assert_eq!(stats.rx_queues[1].packets, 40);
    assert_eq!(stats.tx_queues[0].packets, 40);
    drop((virtio, vhost));
    assert_pool_full(&pool);
}

#[test]
fn the_backend_going_and_coming_back_is_survived() {
    let pool = shared_pool(1023);
    let path = socket_path();
    let (mut vhost, mut virtio) = pair(&path, &pool, 1);
    let out = test_frames([2; 6], 5, 0, 20, 3);
    assert_eq!(send(&mut virtio, &mut vhost, 0, mbufs(&pool, &out)), out);
    // Buffers in the rings when the backend goes.
    let mut rx: Burst = Burst::new();
    virtio.rx_queue(0).unwrap().rx_burst(&mut rx);
    assert!(pool.available() < 1023 - 200, "the Rx ring is stocked");

    vhost.stop();
    wait_for("the link goes down", || xstat(&virtio, "link_downs") == 1);
    assert_eq!(virtio.rx_queue(0).unwrap().rx_burst(&mut rx), 0);
    let mut refused: Burst = Burst::new();
    refused
        .push(pool.alloc_from_slice(&out[0]).unwrap())
        .unwrap();
    assert_eq!(virtio.tx_queue(0).unwrap().tx_burst(&mut refused), 1);
    assert!(
        refused.is_empty(),
        "dropped by the port, not left to the caller"
    );
    assert_eq!(virtio.stats().tx_errors, 1);
    assert_eq!(xstat(&virtio, "tx_not_ready_errors"), 1);
    drop(refused);
    assert_pool_full(&pool);

    vhost.start().unwrap();
    wait_for("the port connects again", || {
        xstat(&virtio, "link_ups") == 2
    });
    assert_eq!(
        send(&mut virtio, &mut vhost, 0, mbufs(&pool, &out)),
        out,
        "after"
    );
    assert_eq!(
        send(&mut vhost, &mut virtio, 0, mbufs(&pool, &out)),
        out,
        "back after"
    );
    drop((virtio, vhost));
    assert_pool_full(&pool);
}

#[test]
fn as_a_server_it_waits_for_a_backend_and_serves_the_next() {
    let pool = shared_pool(1023);
    let path = socket_path();
    let mut virtio = port(
        &format!("virtio:path={},server=1", path.display()),
        &pool,
        1,
    );
    virtio.start().unwrap();
    let mut burst: Burst = Burst::new();
    assert_eq!(virtio.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    let out = test_frames([2; 6], 6, 0, 10, 5);
    for round in 1..=2 {
        let mut vhost = port(&format!("vhost:path={},server=0", path.display()), &pool, 1);
        vhost.start().unwrap();
        wait_for("a backend connects", || xstat(&virtio, "link_ups") == round);
        let sent = mbufs(&pool, &out);
        assert_eq!(send(&mut vhost, &mut virtio, 0, sent), out, "round {round}");
        drop(vhost);
        wait_for("the backend goes", || xstat(&virtio, "link_downs") == round);
    }
    virtio.stop();
    assert!(!path.exists(), "the socket file goes at stop");
    drop(virtio);
    assert_pool_full(&pool);
}

#[test]
fn what_is_wrong_at_start_is_the_error() {
    let pool = shared_pool(255);
    let private = TestPool::new(255).build();
    let path = socket_path();
    let spec = format!("virtio:path={}", path.display());
    let err = open(&spec, PortConfig::new(Some(private.clone())))
        .unwrap_err()
        .to_string();
    assert!(err.contains("MbufPool::new_shared"), "{err}");
    let err = open(&spec, PortConfig::new(Some(pool.clone())).nb_rxd(3))
        .unwrap_err()
        .to_string();
    assert!(err.contains("driver virtio takes 16 to 32768"), "{err}");

    let mut virtio = port(&spec, &pool, 1);
    let err = virtio.start().unwrap_err().to_string();
    assert!(err.contains("no socket there"), "{err}");
    // A socket file nobody listens on.
    drop(UnixListener::bind(&path).unwrap());
    let err = virtio.start().unwrap_err().to_string();
    assert!(err.contains("nobody listens"), "{err}");
    std::fs::remove_file(&path).unwrap();

    // A backend without VERSION_1.
    let listener = UnixListener::bind(&path).unwrap();
    let backend = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut backend = Backend::new(BackendConfig {
            features: feature(VIRTIO_NET_F_MRG_RXBUF),
            protocol_features: protocol_features::REPLY_ACK,
            queue_pairs: 1,
        });
        let _ = backend.serve(&stream, &mut ());
    });
    let err = virtio.start().unwrap_err().to_string();
    assert!(err.contains("VIRTIO_F_VERSION_1"), "{err}");
    backend.join().unwrap();
    std::fs::remove_file(&path).unwrap();
    drop(virtio);
    assert_pool_full(&pool);
}

/// A backend's data path that reports where each ring's used ring is.
/// A backend thread offering `features` on one queue pair, which reports
/// each started vring's used ring address and keeps its mappings until
/// [`finish`](Self::finish).
struct RingsBackend {
    path: PathBuf,
    used: mpsc::Receiver<(usize, usize)>,
    done: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl RingsBackend {
    fn spawn(features: u64) -> RingsBackend {
        let path = socket_path();
        let listener = UnixListener::bind(&path).unwrap();
        let (rings, used) = mpsc::channel();
        let (done, finish) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut backend = Backend::new(BackendConfig {
                features,
                protocol_features: protocol_features::REPLY_ACK,
                queue_pairs: 1,
            });
            let mut handler = UsedRings(rings);
            let _ = backend.serve(&stream, &mut handler);
            // The mapping lives until the port has finished with the rings.
            let _ = finish.recv();
        });
        RingsBackend {
            path,
            used,
            done,
            thread,
        }
    }

    /// The used rings' addresses of queues 0 (Rx) and 1 (Tx), once the
    /// port has started.
    fn used_rings(&self) -> (usize, usize) {
        let used: std::collections::HashMap<usize, usize> = self.used.try_iter().collect();
        (used[&0], used[&1])
    }

    fn finish(self) {
        self.done.send(()).unwrap();
        self.thread.join().unwrap();
        let _ = std::fs::remove_file(&self.path);
    }
}

struct UsedRings(mpsc::Sender<(usize, usize)>);

impl VringHandler for UsedRings {
    fn vring_started(&mut self, ring: &ReadyVring<'_>) {
        let _ = self.0.send((ring.index, ring.used.as_ptr() as usize));
    }
}

/// Writes used entry `slot` of the used ring at `used`.
///
/// # Safety
///
/// `used` is a live used ring of more than `slot` entries.
unsafe fn write_used(used: usize, slot: usize, id: u32, len: u32) {
    let entry = (used + 4 + 8 * slot) as *mut u32;
    // SAFETY: inside the ring (the caller's promise); the port reads the
    // entry only after the index store that follows.
    unsafe {
        entry.write_volatile(id.to_le());
        entry.add(1).write_volatile(len.to_le());
    }
}

/// Stores the used index of the used ring at `used`.
///
/// # Safety
///
/// `used` is a live used ring.
unsafe fn store_used_idx(used: usize, idx: u16) {
    // SAFETY: the index is the 2-aligned word at offset 2 of a live ring,
    // accessed atomically by both sides.
    unsafe { AtomicU16::from_ptr((used + 2) as *mut u16) }.store(idx.to_le(), Ordering::Release);
}

#[test]
fn bad_used_entries_are_counted_and_their_buffers_come_home() {
    let pool = shared_pool(1023);
    let backend =
        RingsBackend::spawn(feature(VIRTIO_F_VERSION_1) | feature(VIRTIO_NET_F_MRG_RXBUF));
    let mut virtio = port(&format!("virtio:path={}", backend.path.display()), &pool, 1);
    virtio.start().unwrap();
    let (rx_used, tx_used) = backend.used_rings();

    let mut burst: Burst = Burst::new();
    assert_eq!(virtio.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    assert_eq!(pool.available(), 1023 - 256, "the Rx ring is stocked");
    // SAFETY: the backend thread keeps its mapping of the ring until told
    // to finish; the ring has 256 entries.
    unsafe {
        write_used(rx_used, 0, 9999, 0); // no such head
        write_used(rx_used, 1, 0, 5000); // longer than the buffer
        write_used(rx_used, 2, 1, 4); // shorter than the header
        store_used_idx(rx_used, 3);
    }
    assert_eq!(virtio.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    assert_eq!(xstat(&virtio, "rx_bad_used_id_errors"), 1);
    assert_eq!(xstat(&virtio, "rx_bad_used_length_errors"), 2);
    // SAFETY: as above.
    unsafe { store_used_idx(rx_used, 3 + 1000) };
    assert_eq!(virtio.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    assert_eq!(xstat(&virtio, "rx_ring_errors"), 1);

    // A Tx chain returned with a length, and an entry naming nothing.
    let mut out: Burst = Burst::new();
    for seq in 0..2 {
        out.push(
            pool.alloc_from_slice(&test_frame([2; 6], 7, seq, 60))
                .unwrap(),
        )
        .unwrap();
    }
    assert_eq!(virtio.tx_queue(0).unwrap().tx_burst(&mut out), 2);
    // SAFETY: as above.
    unsafe {
        write_used(tx_used, 0, 0, 60);
        write_used(tx_used, 1, 77, 0);
        store_used_idx(tx_used, 2);
    }
    assert_eq!(virtio.tx_queue(0).unwrap().tx_done_cleanup(usize::MAX), 1);
    assert_eq!(xstat(&virtio, "tx_bad_used_length_errors"), 1);
    assert_eq!(xstat(&virtio, "tx_bad_used_id_errors"), 1);

    virtio.stop();
    backend.finish();
    drop(virtio);
    assert_pool_full(&pool);
}

/// With `VIRTIO_F_IN_ORDER` offered (and accepted unless `in_order=0`), a
/// backend that returns three Tx chains with one used entry naming the
/// last: in order all three come back; without it, only the named one.
/// Rx buffers sit at the descriptor of their ring slot.
fn in_order_batch(accept: bool) {
    let pool = shared_pool(1023);
    let backend = RingsBackend::spawn(feature(VIRTIO_F_VERSION_1) | feature(VIRTIO_F_IN_ORDER));
    let spec = format!(
        "virtio:path={},in_order={}",
        backend.path.display(),
        u8::from(accept)
    );
    let mut virtio = port(&spec, &pool, 1);
    virtio.start().unwrap();
    let (rx_used, tx_used) = backend.used_rings();

    // Rx: the buffers of slots 0 and 1 come back (descriptors 0 and 1).
    let mut burst: Burst = Burst::new();
    assert_eq!(virtio.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    // SAFETY: the backend thread keeps its mapping of the ring until told
    // to finish; the ring has 256 entries.
    unsafe {
        write_used(rx_used, 0, 0, 12 + 60);
        write_used(rx_used, 1, 1, 12 + 70);
        store_used_idx(rx_used, 2);
    }
    assert_eq!(virtio.rx_queue(0).unwrap().rx_burst(&mut burst), 2);
    let lens: Vec<u32> = burst.iter().map(|m| m.pkt_len()).collect();
    assert_eq!(lens, [60, 70]);
    burst.clear();

    let mut out: Burst = Burst::new();
    for seq in 0..3 {
        out.push(
            pool.alloc_from_slice(&test_frame([2; 6], 7, seq, 60))
                .unwrap(),
        )
        .unwrap();
    }
    assert_eq!(virtio.tx_queue(0).unwrap().tx_burst(&mut out), 3);
    // SAFETY: as above.
    unsafe {
        write_used(tx_used, 0, 2, 0);
        store_used_idx(tx_used, if accept { 3 } else { 1 });
    }
    let want = if accept { 3 } else { 1 };
    assert_eq!(
        virtio.tx_queue(0).unwrap().tx_done_cleanup(usize::MAX),
        want
    );
    for name in ["tx_bad_used_id_errors", "rx_bad_used_id_errors"] {
        assert_eq!(xstat(&virtio, name), 0, "{name}");
    }

    virtio.stop();
    backend.finish();
    drop(virtio);
    assert_pool_full(&pool);
}

#[test]
fn in_order_one_used_entry_returns_a_batch_of_tx_chains() {
    in_order_batch(true);
}

#[test]
fn with_in_order_refused_a_used_entry_returns_its_own_chain() {
    in_order_batch(false);
}

#[test]
fn two_queue_pairs_of_a_single_queue_backend_are_refused() {
    let pool = shared_pool(1023);
    let path = socket_path();
    let mut vhost = port(&format!("vhost:path={}", path.display()), &pool, 1);
    vhost.start().unwrap();
    let mut virtio = port(
        &format!("virtio:path={},queues=2", path.display()),
        &pool,
        2,
    );
    let err = virtio.start().unwrap_err().to_string();
    assert!(err.contains("without multiqueue"), "{err}");
    assert!(!virtio.is_started());
    drop((virtio, vhost));
    assert_pool_full(&pool);
}

#[test]
fn a_stopped_port_starts_again_on_fresh_rings() {
    let pool = shared_pool(1023);
    let path = socket_path();
    let (mut vhost, mut virtio) = pair(&path, &pool, 1);
    let out = test_frames([2; 6], 8, 0, 50, 9);
    assert_eq!(send(&mut virtio, &mut vhost, 0, mbufs(&pool, &out)), out);
    virtio.stop();
    // Every buffer is home but the vhost port's spare Rx mbuf.
    let spare = vhost.counters().rx[0].posted.get();
    assert_eq!(u64::from(pool.available()) + spare, 1023);
    virtio.start().unwrap();
    assert_eq!(xstat(&virtio, "link_ups"), 2);
    assert_eq!(send(&mut virtio, &mut vhost, 0, mbufs(&pool, &out)), out);
    assert_eq!(send(&mut vhost, &mut virtio, 0, mbufs(&pool, &out)), out);
    drop((virtio, vhost));
    assert_pool_full(&pool);
}
