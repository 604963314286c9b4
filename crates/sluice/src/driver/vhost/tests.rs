//! The vhost port against a guest made of this crate's own pieces: a
//! [`Frontend`] on the port's socket, memfd memory shared through
//! SET_MEM_TABLE, and a [`DriverQueue`] per vring. Frames cross both ways
//! byte for byte, headers are checked, bad chains counted, the frontend
//! goes and another comes, and every buffer is home at the end.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::driver::open;
use crate::mbuf::{Burst, Mbuf, MbufPool};
use crate::port::{Port, PortConfig};
use crate::test_support::frames::test_frame;
use crate::test_support::{TestPool, assert_pool_full, test_pool};
use crate::vhost_user::message::{MemoryRegion, VringAddress};
use crate::vhost_user::socket::tests::memfd;
use crate::vhost_user::{F_PROTOCOL_FEATURES, Frontend};
use crate::virtio::memory::{GuestMemory, Mapping};
use crate::virtio::split::{DriverQueue, QueueLayout, Segment};
use crate::virtio::{VIRTIO_F_EVENT_IDX, VIRTIO_NET_F_MRG_RXBUF, feature, net_hdr};

const MEM_SIZE: usize = 2 << 20;
const RING_SIZE: u32 = 256;
/// Where vring `i` lies (even: a receive ring of the guest, odd: a
/// transmit ring), for up to 4 vrings; the buffers follow.
const fn ring_at(i: usize) -> u64 {
    i as u64 * 0x4000
}
const BUF_LEN: u32 = 2048;
/// Buffer slots per vring.
const SLOTS: u64 = 200;
/// Where vring `i`'s buffers lie.
const fn bufs_at(i: usize) -> u64 {
    0x10000 + i as u64 * SLOTS * BUF_LEN as u64
}

/// A socket path of this test process, unused so far.
fn socket_path() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "sluice-vhost-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

fn eventfd() -> OwnedFd {
    super::eventfd().unwrap()
}

/// Reads an eventfd's count (0 when nothing was signalled).
fn eventfd_take(fd: &OwnedFd) -> u64 {
    let mut v = 0u64;
    // SAFETY: a live descriptor and an 8-byte buffer.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut v).cast(), 8) };
    if n == 8 { v } else { 0 }
}

/// Where the kernel keeps the 2 MiB hugepage pool's counts.
const HUGEPAGES_2M: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";

/// Free 2 MiB hugepages made sure of for a test: the pool is raised (as
/// root) when too few are free, and put back to its size on drop.
struct HugePages {
    /// The pool's size before, when it was raised.
    restore: Option<u64>,
}

impl HugePages {
    fn count(name: &str) -> Option<u64> {
        std::fs::read_to_string(format!("{HUGEPAGES_2M}/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// At least `want` free hugepages, or why not.
    fn reserve(want: u64) -> Result<HugePages, String> {
        let free = Self::count("free_hugepages").ok_or("no 2 MiB hugepages in this kernel")?;
        if free >= want {
            return Ok(HugePages { restore: None });
        }
        let total = Self::count("nr_hugepages").ok_or("no hugepage pool size")?;
        std::fs::write(
            format!("{HUGEPAGES_2M}/nr_hugepages"),
            (total + want - free).to_string(),
        )
        .map_err(|e| format!("cannot reserve hugepages: {e}"))?;
        let guard = HugePages {
            restore: Some(total),
        };
        match Self::count("free_hugepages") {
            Some(now) if now >= want => Ok(guard),
            _ => Err(format!("{want} hugepages could not be reserved")),
        }
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        if let Some(total) = self.restore {
            let _ = std::fs::write(format!("{HUGEPAGES_2M}/nr_hugepages"), total.to_string());
        }
    }
}

/// A memfd of `MEM_SIZE` bytes on hugetlbfs (`MFD_HUGETLB`, 2 MiB pages),
/// or why there is none.
fn hugetlb_memfd() -> Result<OwnedFd, String> {
    // SAFETY: a NUL-terminated name and plain flags.
    let fd = unsafe {
        libc::memfd_create(
            c"sluice-vhost-huge".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_HUGETLB | libc::MFD_HUGE_2MB,
        )
    };
    if fd < 0 {
        return Err(format!(
            "no hugetlb memfd: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: a live descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), MEM_SIZE as libc::off_t) } != 0 {
        return Err(format!(
            "hugetlb memfd: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(fd)
}

/// Skips (or, under CI, fails) a test that needs what is missing.
fn skip(missing: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{missing} under CI"
    );
    eprintln!("skipped: {missing}");
}

/// The guest's view of the shared memory: mapped here, unmapped on drop.
struct SharedMap {
    ptr: *mut u8,
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Guest::connect`, unmapped only here,
        // after the guest's queues and memory (declared before it) dropped.
        unsafe { libc::munmap(self.ptr.cast(), MEM_SIZE) };
    }
}

/// A guest: a frontend with one queue pair on memfd memory.
struct Guest {
    front: Frontend,
    /// Per vring: even ones carry frames for the guest, odd ones frames
    /// from it.
    rings: Vec<DriverQueue>,
    /// The queue pair the helpers below use.
    pair: usize,
    mem: Arc<GuestMemory>,
    features: u64,
    calls: Vec<OwnedFd>,
    /// The memory's descriptor and region, for SET_MEM_TABLE.
    memfd: OwnedFd,
    region: MemoryRegion,
    /// Buffer address of each chain in flight, by vring and head.
    bufs: Vec<HashMap<u16, u64>>,
    next_slot: Vec<u64>,
    _map: SharedMap,
}

impl Guest {
    /// Connects to `path` and sets up both rings, with the offered features
    /// that `want` keeps.
    fn connect(path: &Path, want: u64) -> Guest {
        Guest::over(Frontend::connect(path).unwrap(), want, 1)
    }

    /// Sets up the rings of `pairs` queue pairs over `front`, on memfd
    /// memory.
    fn over(front: Frontend, want: u64, pairs: usize) -> Guest {
        Guest::over_memory(front, want, pairs, memfd(MEM_SIZE as u64))
    }

    /// Sets up the rings of `pairs` queue pairs over `front`, on the
    /// `MEM_SIZE` bytes of file `fd`.
    fn over_memory(mut front: Frontend, want: u64, pairs: usize, fd: OwnedFd) -> Guest {
        let offered = front.get_features().unwrap();
        assert_ne!(offered & F_PROTOCOL_FEATURES, 0);
        let protocol = front.get_protocol_features().unwrap();
        front.set_protocol_features(protocol).unwrap();
        assert!(front.reply_ack());
        front.set_owner().unwrap();
        let features = offered & (want | F_PROTOCOL_FEATURES);
        front.set_features(features).unwrap();

        // SAFETY: a fresh shared mapping of the whole memfd at an address
        // the kernel chooses.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MEM_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let map = SharedMap { ptr: ptr.cast() };
        let uaddr = ptr as u64;
        let region = MemoryRegion {
            guest_phys_addr: 0,
            memory_size: MEM_SIZE as u64,
            userspace_addr: uaddr,
            mmap_offset: 0,
        };
        front.set_mem_table(&[(region, fd.as_fd())]).unwrap();
        // SAFETY: the mapping lives in `map`, which the guest drops last;
        // in this process it is accessed only through this memory.
        let mapping = unsafe { Mapping::from_raw(map.ptr, MEM_SIZE) };
        let mem = Arc::new(GuestMemory::new(vec![(0, mapping)]).unwrap());

        let calls: Vec<OwnedFd> = (0..2 * pairs).map(|_| eventfd()).collect();
        let mut rings = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let layout = QueueLayout::contiguous(ring_at(i), RING_SIZE).unwrap();
            let index = i as u32;
            front.set_vring_call(index, Some(call.as_fd())).unwrap();
            front.set_vring_num(index, RING_SIZE).unwrap();
            front.set_vring_base(index, 0).unwrap();
            front
                .set_vring_addr(&VringAddress {
                    index,
                    flags: 0,
                    desc_user_addr: uaddr + layout.desc_table(),
                    used_user_addr: uaddr + layout.used_ring(),
                    avail_user_addr: uaddr + layout.avail_ring(),
                    log_guest_addr: 0,
                })
                .unwrap();
            rings.push(DriverQueue::new(Arc::clone(&mem), layout, features).unwrap());
            front.set_vring_kick(index, None).unwrap();
            front.set_vring_enable(index, true).unwrap();
        }
        Guest {
            front,
            rings,
            pair: 0,
            mem,
            features,
            calls,
            memfd: fd,
            region,
            bufs: vec![HashMap::new(); 2 * pairs],
            next_slot: vec![0; 2 * pairs],
            _map: map,
        }
    }

    fn hdr_len(&self) -> usize {
        net_hdr::header_len(self.features)
    }

    fn slot(&mut self, ring: usize) -> u64 {
        let k = self.next_slot[ring];
        self.next_slot[ring] += 1;
        bufs_at(ring) + (k % SLOTS) * u64::from(BUF_LEN)
    }

    /// Offers `frame` (after a zeroed header) on the transmit ring, in
    /// one buffer, or in pieces of `split` bytes.
    fn send(&mut self, frame: &[u8], split: Option<usize>) {
        let mut data = vec![0u8; self.hdr_len()];
        data.extend_from_slice(frame);
        let t = 2 * self.pair + 1;
        let addr = self.slot(t);
        self.mem.write_from(addr, &data).unwrap();
        let piece = split.unwrap_or(data.len());
        let segments: Vec<Segment> = (0..data.len())
            .step_by(piece)
            .map(|off| Segment {
                addr: addr + off as u64,
                len: piece.min(data.len() - off) as u32,
                writable: false,
            })
            .collect();
        let head = self.rings[t].add_chain(&segments).unwrap();
        self.bufs[t].insert(head, addr);
        self.rings[t].publish_avail().unwrap();
    }

    /// Offers a chain the device must refuse: a buffer outside memory.
    fn send_bad_chain(&mut self) {
        // `add_chain` checks addresses: write the descriptor by hand.
        let t = 2 * self.pair + 1;
        let addr = self.slot(t);
        let head = self.rings[t]
            .add_chain(&[Segment {
                addr,
                len: 64,
                writable: false,
            }])
            .unwrap();
        let layout = *self.rings[t].layout();
        self.mem
            .write_obj::<u64>(layout.desc(head), MEM_SIZE as u64 + 0x1000)
            .unwrap();
        self.bufs[t].insert(head, addr);
        self.rings[t].publish_avail().unwrap();
    }

    /// Reclaims what the device returned on the transmit ring; asserts
    /// every length is 0.
    fn reclaim_tx(&mut self) -> usize {
        let t = 2 * self.pair + 1;
        let mut n = 0;
        while let Some(used) = self.rings[t].pop_used().unwrap() {
            assert_eq!(used.len, 0, "a device-readable chain comes back empty");
            self.bufs[t].remove(&used.head).unwrap();
            n += 1;
        }
        n
    }

    /// Offers `n` writable buffers of `len` bytes on the receive ring.
    fn post_rx(&mut self, n: usize, len: u32) {
        let r = 2 * self.pair;
        for _ in 0..n {
            let addr = self.slot(r);
            let head = self.rings[r]
                .add_chain(&[Segment {
                    addr,
                    len,
                    writable: true,
                }])
                .unwrap();
            self.bufs[r].insert(head, addr);
        }
        self.rings[r].publish_avail().unwrap();
    }

    /// The next frame the device wrote on the receive ring: its header's
    /// `num_buffers` and the frame.
    fn recv(&mut self) -> Option<(u16, Vec<u8>)> {
        let mut bytes = self.take_rx()?;
        let hdr = self.hdr_len();
        assert!(bytes.len() >= hdr, "a used buffer holds the whole header");
        let header = bytes[..hdr].to_vec();
        assert!(
            header[..10].iter().all(|&b| b == 0),
            "no offload: a zeroed header"
        );
        let num_buffers = u16::from_le_bytes([header[10], header[11]]);
        for _ in 1..num_buffers {
            bytes.extend(self.take_rx().expect("every buffer the header counts"));
        }
        Some((num_buffers, bytes.split_off(hdr)))
    }

    fn take_rx(&mut self) -> Option<Vec<u8>> {
        let r = 2 * self.pair;
        let used = self.rings[r].pop_used().unwrap()?;
        let addr = self.bufs[r].remove(&used.head).unwrap();
        let mut bytes = vec![0u8; used.len as usize];
        self.mem.read_into(addr, &mut bytes).unwrap();
        Some(bytes)
    }
}

fn vhost_port(spec: &str, pool: &MbufPool) -> Port {
    let mut config = PortConfig::new(Some(pool.clone()));
    config.mtu = 9000;
    open(spec, config).unwrap()
}

/// Receives up to `want` frames from `port` in bursts (a bounded number of
/// calls: each burst the guest has published is there at once).
fn receive(port: &mut Port, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut burst: Burst = Burst::new();
    for _ in 0..want.div_ceil(8) + 4 {
        port.rx_queue(0).unwrap().rx_burst(&mut burst);
        got.extend(burst.iter().map(|m| m.to_vec()));
        burst.clear();
        if got.len() >= want {
            break;
        }
    }
    got
}

/// Every feature the port offers, but packed rings (the guest's queues
/// here are split) and in-order returns (the guest reads a used entry per
/// chain; the virtqueue's own tests and the testpmd tests cover them).
const ALL: u64 =
    !(feature(crate::virtio::VIRTIO_F_RING_PACKED) | feature(crate::virtio::VIRTIO_F_IN_ORDER));

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

/// The port's xstat `name`.
fn xstat(port: &Port, name: &str) -> u64 {
    port.xstats()
        .into_iter()
        .find(|(n, _)| n == name)
        .map_or_else(|| panic!("no xstat {name}"), |(_, v)| v)
}

#[test]
fn frames_from_the_guest_arrive_byte_exact() {
    let pool = test_pool(1023);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    assert_eq!(guest.hdr_len(), net_hdr::HEADER_LEN);

    let frames: Vec<Vec<u8>> = (0..40)
        .map(|i| test_frame([2, 0, 0, 0, 0, 1], 7, i, 60 + 37 * i as usize))
        .collect();
    for (i, f) in frames.iter().enumerate() {
        // Some chains carry the header and the frame in several buffers.
        guest.send(f, (i % 3 == 0).then_some(50));
    }
    let got = receive(&mut port, frames.len());
    assert_eq!(got, frames, "every frame, in order, byte for byte");
    assert_eq!(guest.reclaim_tx(), frames.len());
    let stats = port.stats();
    assert_eq!(stats.rx_packets, 40);
    assert_eq!(
        stats.rx_bytes,
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    // GET_VRING_BASE stops the ring at the index after the last chain.
    assert_eq!(guest.front.get_vring_base(1).unwrap(), 40);
    guest.send(&frames[0], None);
    assert!(
        receive(&mut port, 1).is_empty(),
        "a stopped ring is not read"
    );

    drop(guest);
    port.stop();
    assert!(!path.exists(), "the socket goes with the port");
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn a_frame_longer_than_an_mbuf_arrives_as_a_chain() {
    let pool = TestPool::new(255).data_room(1024).build();
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    let frame = test_frame([2, 0, 0, 0, 0, 1], 7, 1, 1800);
    guest.send(&frame, Some(700));
    let mut burst: Burst = Burst::new();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 1);
    assert!(burst[0].nb_segs() >= 2, "{}", burst[0].nb_segs());
    assert_eq!(burst[0].to_vec(), frame);
    drop(burst);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn frames_for_the_guest_arrive_with_their_header() {
    let pool = test_pool(1023);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    assert_ne!(guest.features & feature(VIRTIO_F_EVENT_IDX), 0);

    guest.post_rx(40, BUF_LEN);
    let frames: Vec<Vec<u8>> = (0..40)
        .map(|i| test_frame([2, 0, 0, 0, 0, 2], 9, i, 60 + 29 * i as usize))
        .collect();
    let mut burst: Burst<64> = Burst::new();
    for f in &frames {
        burst.push(pool.alloc_from_slice(f).unwrap()).unwrap();
    }
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 40);
    assert!(burst.is_empty());
    assert!(eventfd_take(&guest.calls[0]) >= 1, "the guest is signalled");
    let mut got = Vec::new();
    while let Some((num_buffers, frame)) = guest.recv() {
        assert_eq!(num_buffers, 1);
        got.push(frame);
    }
    assert_eq!(got, frames);

    // No buffer left: the rest stays with the caller.
    guest.post_rx(2, BUF_LEN);
    for f in &frames[..4] {
        burst.push(pool.alloc_from_slice(f).unwrap()).unwrap();
    }
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 2);
    assert_eq!(burst.len(), 2);
    burst.clear();
    // A frame spans several buffers with mergeable buffers.
    let long = test_frame([2, 0, 0, 0, 0, 2], 9, 99, 5000);
    guest.recv();
    guest.recv();
    guest.post_rx(8, 1024);
    burst.push(chained(&pool, &long)).unwrap();
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 1);
    let (num_buffers, frame) = guest.recv().unwrap();
    assert_eq!(num_buffers, 5, "12 + 5000 bytes in buffers of 1024");
    assert_eq!(frame, long);
    let stats = port.stats();
    assert_eq!(stats.tx_packets, 43);
    assert_eq!(stats.tx_errors, 0);

    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn without_mergeable_buffers_a_long_frame_is_dropped_and_counted() {
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL & !feature(VIRTIO_NET_F_MRG_RXBUF));
    guest.post_rx(4, 1024);
    let mut burst: Burst = Burst::new();
    burst
        .push(chained(&pool, &test_frame([2; 6], 1, 1, 3000)))
        .unwrap();
    burst
        .push(
            pool.alloc_from_slice(&test_frame([2; 6], 1, 2, 100))
                .unwrap(),
        )
        .unwrap();
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 2);
    // The long one's buffer came back empty, the short one arrived.
    assert_eq!(guest.take_rx().unwrap().len(), 0);
    let (num_buffers, frame) = guest.recv().unwrap();
    assert_eq!((num_buffers, frame.len()), (1, 100));
    assert_eq!(xstat(&port, "tx_too_long_errors"), 1);
    assert_eq!(port.stats().tx_errors, 1);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn bad_chains_are_counted_and_returned() {
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    let frame = test_frame([2; 6], 1, 1, 64);
    guest.send(&frame, None);
    guest.send_bad_chain();
    guest.send(&frame, None);
    // A chain shorter than the header.
    let mut short = Guest::hdr_len(&guest);
    short -= 2;
    let addr = guest.slot(1);
    let head = guest.rings[1]
        .add_chain(&[Segment {
            addr,
            len: short as u32,
            writable: false,
        }])
        .unwrap();
    guest.bufs[1].insert(head, addr);
    guest.rings[1].publish_avail().unwrap();
    // A runt: 8 bytes after the header.
    guest.send(&[0xee; 8], None);
    assert_eq!(receive(&mut port, 2), [frame.clone(), frame]);
    assert_eq!(guest.reclaim_tx(), 5, "good and bad chains all come back");
    assert_eq!(xstat(&port, "rx_runt_errors"), 1);
    assert_eq!(port.stats().rx_errors, 2, "the short chain and the runt");
    assert_eq!(xstat(&port, "rx_bad_chain_errors"), 1);
    assert_eq!(xstat(&port, "rx_bad_length_errors"), 1);
    assert_eq!(port.stats().rx_packets, 2);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn not_ready_drops_and_a_new_frontend_is_served() {
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut burst: Burst = Burst::new();
    burst
        .push(
            pool.alloc_from_slice(&test_frame([2; 6], 1, 1, 64))
                .unwrap(),
        )
        .unwrap();
    assert_eq!(
        port.rx_queue(0).unwrap().rx_burst(&mut Burst::<32>::new()),
        0
    );
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 1);
    assert!(burst.is_empty(), "taken and dropped");
    assert_eq!(xstat(&port, "tx_not_ready_errors"), 1);
    assert_eq!(port.stats().tx_errors, 1);
    assert_eq!(xstat(&port, "link_ups"), 0);

    for round in 0..3u32 {
        let mut guest = Guest::connect(&path, ALL);
        let frame = test_frame([2; 6], 1, round, 80);
        guest.send(&frame, None);
        assert_eq!(
            receive(&mut port, 1),
            std::slice::from_ref(&frame),
            "round {round}"
        );
        guest.post_rx(1, BUF_LEN);
        let mut out: Burst = Burst::new();
        out.push(pool.alloc_from_slice(&frame).unwrap()).unwrap();
        assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut out), 1);
        assert_eq!(guest.recv().unwrap().1, frame);
        assert_eq!(xstat(&port, "link_ups"), u64::from(round) + 1);
        // The frontend goes; the next one connects when the control thread
        // has let this session go (connect waits in the backlog till then).
    }
    drop(burst);
    port.stop();
    assert_eq!(xstat(&port, "link_downs"), 3, "each session's end");
    drop(port);
    assert!(!path.exists());
    assert_pool_full(&pool);
}

#[test]
fn a_live_socket_is_an_error_and_a_stale_one_is_replaced() {
    let pool = test_pool(255);
    let path = socket_path();
    let spec = format!("vhost:path={}", path.display());
    let mut port = vhost_port(&spec, &pool);
    port.start().unwrap();
    let mut config = PortConfig::new(Some(pool.clone()));
    config.mtu = 9000;
    let err = open(&spec, config).unwrap_err().to_string();
    assert!(err.contains("another process is listening"), "{err}");
    drop(port);
    // A stale socket file: bound, never listened on by anyone alive.
    let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(stale);
    assert!(path.exists());
    let mut port = vhost_port(&spec, &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    let frame = test_frame([2; 6], 1, 5, 70);
    guest.send(&frame, None);
    assert_eq!(receive(&mut port, 1), [frame]);
    drop(guest);
    drop(port);
    // A socket someone else listens on, and a file that is no socket:
    // both left alone.
    let other = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let mut config = PortConfig::new(Some(pool.clone()));
    config.mtu = 9000;
    let err = open(&spec, config).unwrap_err().to_string();
    assert!(err.contains("another process is listening"), "{err}");
    drop(other);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"").unwrap();
    let mut config = PortConfig::new(Some(pool.clone()));
    config.mtu = 9000;
    let err = open(&spec, config).unwrap_err().to_string();
    assert!(err.contains("exists and is not a socket"), "{err}");
    assert!(path.exists());
    std::fs::remove_file(&path).unwrap();
    assert_pool_full(&pool);
}

#[test]
fn as_a_client_it_connects_to_a_listening_frontend() {
    let pool = test_pool(255);
    let path = socket_path();
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let mut port = vhost_port(&format!("vhost:path={},server=0", path.display()), &pool);
    port.start().unwrap();
    let (stream, _) = listener.accept().unwrap();
    // The guest's setup over the accepted stream.
    let mut guest = Guest::over(Frontend::from_stream(stream), ALL, 1);
    let frame = test_frame([2; 6], 1, 6, 90);
    guest.send(&frame, None);
    assert_eq!(receive(&mut port, 1), [frame]);
    drop(guest);
    drop(port);
    assert!(path.exists(), "the frontend's socket is not the port's");
    let _ = std::fs::remove_file(&path);
    assert_pool_full(&pool);
}

#[test]
fn get_vring_base_waits_for_a_polling_thread_and_returns_its_index() {
    let pool = test_pool(1023);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    let frames: Vec<Vec<u8>> = (0..150)
        .map(|i| test_frame([2; 6], 3, i, 64 + i as usize))
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (rxq, _) = port.queues_mut().unwrap();
    let rxq = &mut rxq[0];
    let (base, got) = std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut got = Vec::new();
            let mut burst: Burst = Burst::new();
            while !stop.load(Ordering::Acquire) {
                rxq.rx_burst(&mut burst);
                got.extend(burst.iter().map(|m| m.to_vec()));
                burst.clear();
            }
            // Stopped: nothing more comes, however often it polls.
            for _ in 0..100 {
                assert_eq!(rxq.rx_burst(&mut burst), 0);
            }
            got
        });
        for f in &frames {
            guest.send(f, None);
        }
        // Taken from the thread in the middle of its polling.
        let base = guest.front.get_vring_base(1).unwrap();
        stop.store(true, Ordering::Release);
        (base, poller.join().unwrap())
    });
    assert_eq!(
        base as usize,
        got.len(),
        "the index after the last frame taken"
    );
    assert_eq!(got, frames[..got.len()], "in order, byte for byte");
    assert_eq!(guest.reclaim_tx(), got.len());
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn each_queue_pair_has_its_own_rings() {
    let pool = test_pool(1023);
    let path = socket_path();
    let mut config = PortConfig::new(Some(pool.clone())).queues(2, 2);
    config.mtu = 9000;
    let mut port = open(&format!("vhost:path={},queues=2", path.display()), config).unwrap();
    port.start().unwrap();
    let front = Frontend::connect(&path).unwrap();
    assert_eq!(front.get_queue_num().unwrap(), 2);
    let mut guest = Guest::over(front, ALL, 2);
    assert_ne!(guest.features & feature(crate::virtio::VIRTIO_NET_F_MQ), 0);

    let mut burst: Burst = Burst::new();
    for pair in [1, 0] {
        guest.pair = pair;
        let frame = test_frame([2; 6], 4, pair as u32, 100 + pair);
        guest.send(&frame, None);
        let other = 1 - pair;
        assert_eq!(port.rx_queue(other).unwrap().rx_burst(&mut burst), 0);
        assert_eq!(port.rx_queue(pair).unwrap().rx_burst(&mut burst), 1);
        assert_eq!(burst.pop().unwrap().to_vec(), frame);
        guest.post_rx(1, BUF_LEN);
        burst.push(pool.alloc_from_slice(&frame).unwrap()).unwrap();
        assert_eq!(port.tx_queue(pair).unwrap().tx_burst(&mut burst), 1);
        assert_eq!(guest.recv().unwrap().1, frame);
        guest.pair = other;
        assert!(guest.recv().is_none(), "nothing on the other pair");
    }
    assert_eq!(port.stats().rx_queues[1].packets, 1);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn a_new_memory_table_moves_the_rings_onto_it() {
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    let frames: Vec<Vec<u8>> = (0..3).map(|i| test_frame([2; 6], 5, i, 90)).collect();
    guest.send(&frames[0], None);
    assert_eq!(receive(&mut port, 1), &frames[..1]);

    // The same memory again: the backend maps it anew, stops the rings
    // (taking them from the queue) and starts them on the new mapping at
    // their index, all before its reply.
    guest.send(&frames[1], None);
    let region = guest.region;
    guest
        .front
        .set_mem_table(&[(region, guest.memfd.as_fd())])
        .unwrap();
    let got = receive(&mut port, 1);
    assert_eq!(got, &frames[1..2]);
    guest.send(&frames[2], None);
    assert_eq!(receive(&mut port, 1), &frames[2..]);
    assert_eq!(guest.reclaim_tx(), 3);
    assert_eq!(guest.front.get_vring_base(1).unwrap(), 3);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn stopping_the_port_ends_the_session_and_a_restart_serves_again() {
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    let frame = test_frame([2; 6], 6, 1, 75);
    guest.send(&frame, None);
    port.stop();
    assert!(!path.exists(), "the socket file goes at stop");
    assert!(
        guest.front.get_queue_num().is_err(),
        "the frontend's session is closed"
    );
    drop(guest);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    guest.send(&frame, None);
    assert_eq!(receive(&mut port, 1), [frame]);
    drop(guest);
    drop(port);
    assert!(!path.exists());
    assert_pool_full(&pool);
}

#[test]
fn frontend_memory_on_hugetlbfs_carries_frames_both_ways() {
    // Two pages: the guest's and the backend's mappings share one, a
    // second memory table the other.
    let _pages = match HugePages::reserve(2) {
        Ok(pages) => pages,
        Err(missing) => return skip(&missing),
    };
    let fd = match hugetlb_memfd() {
        Ok(fd) => fd,
        Err(missing) => return skip(&missing),
    };
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::over_memory(Frontend::connect(&path).unwrap(), ALL, 1, fd);

    let frames: Vec<Vec<u8>> = (0..20)
        .map(|i| test_frame([2, 0, 0, 0, 0, 1], 3, i, 60 + 71 * i as usize))
        .collect();
    for f in &frames {
        guest.send(f, None);
    }
    assert_eq!(receive(&mut port, frames.len()), frames, "guest to port");
    assert_eq!(guest.reclaim_tx(), frames.len());

    guest.post_rx(frames.len(), BUF_LEN);
    let mut burst: Burst<64> = Burst::new();
    for f in &frames {
        burst.push(pool.alloc_from_slice(f).unwrap()).unwrap();
    }
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), frames.len());
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| guest.recv().map(|(_, f)| f)).collect();
    assert_eq!(got, frames, "port to guest");

    // The same hugetlbfs memory as a new table: the rings move onto it.
    guest.send(&frames[0], None);
    let region = guest.region;
    guest
        .front
        .set_mem_table(&[(region, guest.memfd.as_fd())])
        .unwrap();
    assert_eq!(receive(&mut port, 1), &frames[..1]);
    assert_eq!(xstat(&port, "rx_ring_errors"), 0);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

/// Waits (bounded) until the port's xstat `name` reaches `n`.
fn wait_xstat(port: &Port, name: &str, n: u64) {
    let counters = port.counters();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while counters.xstats.get(name).unwrap_or(0) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} did not reach {n}"
        );
        std::thread::yield_now();
    }
}

#[test]
fn a_socket_in_a_missing_directory_is_an_error_for_a_server_and_awaited_by_a_client() {
    let pool = test_pool(255);
    let dir = socket_path().with_extension("dir");
    let path = dir.join("vhost.sock");
    let mut server = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    let err = server.start().unwrap_err().to_string();
    assert!(
        err.contains(&path.display().to_string()) && err.contains("No such file or directory"),
        "{err}"
    );
    // A client connects again until a frontend listens there.
    let mut client = vhost_port(
        &format!("vhost:path={},server=false", path.display()),
        &pool,
    );
    client.start().unwrap();
    std::fs::create_dir(&dir).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (stream, _) = listener.accept().unwrap();
    let mut guest = Guest::over(Frontend::from_stream(stream), ALL, 1);
    let frame = test_frame([2; 6], 4, 1, 70);
    guest.send(&frame, None);
    assert_eq!(receive(&mut client, 1), [frame]);
    drop(guest);
    drop(client);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    assert_pool_full(&pool);
}

#[test]
fn a_frontend_vanishing_mid_traffic_is_counted_and_the_next_one_served() {
    let pool = test_pool(1023);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let counters = port.counters();
    let mut guest = Guest::connect(&path, ALL);
    let frames: Vec<Vec<u8>> = (0..150).map(|i| test_frame([2; 6], 8, i, 64)).collect();
    let received = std::thread::scope(|s| {
        let (rx_queues, _) = port.queues_mut().unwrap();
        let rxq = &mut rx_queues[0];
        let counters = &counters;
        // Polls until the frontend is gone (bounded), dropping what comes.
        let poller = s.spawn(move || {
            let mut burst: Burst = Burst::new();
            let mut received = 0;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while counters.xstats.get("link_downs") == Some(0) {
                assert!(std::time::Instant::now() < deadline, "the link stayed up");
                received += rxq.rx_burst(&mut burst) as u64;
                burst.clear();
            }
            received
        });
        for f in &frames {
            guest.send(f, None);
        }
        // Gone without a word: its socket closes with frames in flight.
        drop(guest);
        poller.join().unwrap()
    });
    assert!(received <= frames.len() as u64);
    assert_eq!(port.stats().rx_packets, received);
    let mut out: Burst = Burst::new();
    out.push(pool.alloc_from_slice(&frames[0]).unwrap())
        .unwrap();
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut out), 1);
    assert_eq!(xstat(&port, "tx_not_ready_errors"), 1);
    drop(out);
    assert_eq!(xstat(&port, "control_errors"), 0, "a close is no error");

    let mut guest = Guest::connect(&path, ALL);
    guest.send(&frames[1], None);
    assert_eq!(receive(&mut port, 1), &frames[1..2]);
    assert_eq!(xstat(&port, "link_ups"), 2);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn features_not_offered_are_refused_and_a_legacy_frontend_is_served() {
    use crate::vhost_user::VhostUserError;
    use crate::virtio::VIRTIO_F_VERSION_1;
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut front = Frontend::connect(&path).unwrap();
    let offered = front.get_features().unwrap();
    let protocol = front.get_protocol_features().unwrap();
    front.set_protocol_features(protocol).unwrap();
    front.set_owner().unwrap();
    // Checksum offload (bit 0) is not offered.
    assert_eq!(offered & 1, 0);
    match front.set_features(offered | 1) {
        Err(VhostUserError::Nack { .. }) => {}
        other => panic!("{other:?}"),
    }
    // Counted once the reply is out.
    wait_xstat(&port, "control_refusals", 1);
    drop(front);

    // Without VERSION_1 (nor mergeable buffers) the header is the legacy
    // 10 bytes; frames cross both ways.
    let mut guest = Guest::connect(
        &path,
        ALL & !(feature(VIRTIO_F_VERSION_1) | feature(VIRTIO_NET_F_MRG_RXBUF)),
    );
    assert_eq!(guest.hdr_len(), 10);
    let frame = test_frame([2; 6], 2, 1, 100);
    guest.send(&frame, None);
    assert_eq!(receive(&mut port, 1), std::slice::from_ref(&frame));
    guest.post_rx(1, BUF_LEN);
    let mut out: Burst = Burst::new();
    out.push(pool.alloc_from_slice(&frame).unwrap()).unwrap();
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut out), 1);
    let bytes = guest.take_rx().unwrap();
    assert_eq!(&bytes[..10], &[0; 10], "a zeroed legacy header");
    assert_eq!(&bytes[10..], frame);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

/// A vhost-user header: request, flags (version 1), payload size.
fn raw_header(request: u32, size: u32) -> Vec<u8> {
    [request, 1, size]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

#[test]
fn malformed_and_truncated_requests_end_the_session_and_are_counted() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let cases: [(&str, Vec<u8>); 4] = [
        // GET_FEATURES claiming a payload far beyond any request's.
        ("too large", raw_header(1, 0x10_0000)),
        // SET_FEATURES claiming 8 bytes and sending 3.
        ("truncated", {
            let mut m = raw_header(2, 8);
            m.extend([1, 2, 3]);
            m
        }),
        // SET_FEATURES with a payload of the wrong size.
        ("wrong size", {
            let mut m = raw_header(2, 4);
            m.extend([0; 4]);
            m
        }),
        // A request code no protocol version has.
        ("unknown", raw_header(9999, 0)),
    ];
    for (n, (what, bytes)) in cases.into_iter().enumerate() {
        let mut stream = UnixStream::connect(&path).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        stream.write_all(&bytes).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "{what}: no reply, the session ends");
        wait_xstat(&port, "control_errors", n as u64 + 1);
    }
    // The port serves the next frontend.
    let mut guest = Guest::connect(&path, ALL);
    let frame = test_frame([2; 6], 3, 1, 64);
    guest.send(&frame, None);
    assert_eq!(receive(&mut port, 1), [frame]);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn absurd_ring_sizes_are_refused_and_the_ring_keeps_serving() {
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    for (n, size) in [0u32, 3, 65536, 1 << 20].into_iter().enumerate() {
        let err = guest.front.set_vring_num(1, size).unwrap_err();
        assert!(
            matches!(err, crate::vhost_user::VhostUserError::Nack { .. }),
            "{size}: {err}"
        );
        wait_xstat(&port, "control_refusals", n as u64 + 1);
    }
    let frame = test_frame([2; 6], 3, 2, 64);
    guest.send(&frame, None);
    assert_eq!(receive(&mut port, 1), [frame]);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn loops_and_buffers_outside_memory_are_counted_and_returned() {
    let pool = test_pool(255);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    // A chain whose descriptor names itself as the next: a loop.
    let t = 1;
    let addr = guest.slot(t);
    let head = guest.rings[t]
        .add_chain(&[Segment {
            addr,
            len: 64,
            writable: false,
        }])
        .unwrap();
    let desc = guest.rings[t].layout().desc(head);
    // flags (NEXT) and next, after the address and length.
    guest.mem.write_obj::<u16>(desc + 12, 1).unwrap();
    guest.mem.write_obj::<u16>(desc + 14, head).unwrap();
    guest.bufs[t].insert(head, addr);
    guest.rings[t].publish_avail().unwrap();
    let frame = test_frame([2; 6], 3, 3, 64);
    guest.send(&frame, None);
    assert_eq!(receive(&mut port, 1), std::slice::from_ref(&frame));
    assert_eq!(xstat(&port, "rx_bad_chain_errors"), 1);
    assert_eq!(guest.reclaim_tx(), 2, "the loop came back too");

    // A receive buffer outside memory: refused, the next one is used.
    let r = 0;
    guest.post_rx(1, BUF_LEN);
    let bad_head = *guest.bufs[r].keys().next().unwrap();
    let desc = guest.rings[r].layout().desc(bad_head);
    guest
        .mem
        .write_obj::<u64>(desc, MEM_SIZE as u64 + 0x1000)
        .unwrap();
    guest.post_rx(1, BUF_LEN);
    let mut out: Burst = Burst::new();
    out.push(pool.alloc_from_slice(&frame).unwrap()).unwrap();
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut out), 1);
    assert_eq!(xstat(&port, "tx_bad_chain_errors"), 1);
    let mut frames = Vec::new();
    while let Some(bytes) = guest.take_rx() {
        frames.push(bytes);
    }
    // The bad buffer came back empty, the frame in the good one.
    assert_eq!(frames.len(), 2);
    assert!(frames.iter().any(|b| b.is_empty()));
    assert!(frames.iter().any(|b| b.len() == 12 + frame.len()));
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

/// A small deterministic generator for the random sequences below
/// (xorshift64*).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
}

/// What the guest puts on its transmit ring in the random sequence.
enum Offered {
    /// A good frame: it must arrive, in order.
    Frame(Vec<u8>),
    /// A buffer outside memory: a bad chain.
    BadChain,
    /// A chain shorter than the header.
    Short,
    /// A frame below the minimum length.
    Runt,
}

#[test]
fn random_bursts_from_the_guest_arrive_in_order_with_every_drop_counted() {
    let pool = test_pool(127);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, ALL);
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let (mut expected, mut got) = (Vec::new(), Vec::new());
    let (mut bad_chains, mut shorts, mut runts, mut offered) = (0u64, 0u64, 0u64, 0usize);
    let mut burst: Burst = Burst::new();
    for round in 0..60 {
        // Fewer chains in flight (of up to 4 descriptors) than the guest
        // has descriptors for.
        for _ in 0..random.range(0, 40).min(60 - guest.bufs[1].len().min(60)) {
            let kind = match random.range(0, 9) {
                0 => Offered::BadChain,
                1 => Offered::Short,
                2 => Offered::Runt,
                _ => {
                    let len = random.range(60, 1500);
                    Offered::Frame(test_frame([2; 6], 5, round * 100 + offered as u32, len))
                }
            };
            match kind {
                Offered::Frame(frame) => {
                    guest.send(&frame, (random.range(0, 3) == 0).then_some(400));
                    expected.push(frame);
                }
                Offered::BadChain => {
                    guest.send_bad_chain();
                    bad_chains += 1;
                }
                Offered::Short => {
                    let addr = guest.slot(1);
                    let head = guest.rings[1]
                        .add_chain(&[Segment {
                            addr,
                            len: 4,
                            writable: false,
                        }])
                        .unwrap();
                    guest.bufs[1].insert(head, addr);
                    guest.rings[1].publish_avail().unwrap();
                    shorts += 1;
                }
                Offered::Runt => {
                    guest.send(&[0xee; 8], None);
                    runts += 1;
                }
            }
            offered += 1;
        }
        // Only a few mbufs free at times (fewer if the queue holds one):
        // chains wait in the ring for them.
        let free = [0, 1, 3, 127][random.range(0, 3)];
        let held: Vec<Mbuf> = (0..127 - free).map_while(|_| pool.alloc()).collect();
        for _ in 0..random.range(1, 4) {
            let cap = random.range(1, 32);
            port.rx_queue(0).unwrap().rx_burst(burst.capped(cap));
            got.extend(burst.iter().map(|m| m.to_vec()));
            burst.clear();
        }
        drop(held);
        guest.reclaim_tx();
    }
    // The rest, with every mbuf free.
    for _ in 0..100 {
        if port.rx_queue(0).unwrap().rx_burst(&mut burst) == 0 {
            break;
        }
        got.extend(burst.iter().map(|m| m.to_vec()));
        burst.clear();
    }
    guest.reclaim_tx();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "every good frame, in order, byte for byte");
    assert!(guest.bufs[1].is_empty(), "every chain came back");
    assert_eq!(xstat(&port, "rx_bad_chain_errors"), bad_chains);
    assert_eq!(xstat(&port, "rx_bad_length_errors"), shorts);
    assert_eq!(xstat(&port, "rx_runt_errors"), runts);
    let stats = port.stats();
    assert_eq!(stats.rx_packets, expected.len() as u64);
    assert_eq!(stats.rx_errors, shorts + runts);
    assert!(stats.rx_nombuf > 0, "some bursts found the pool dry");
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

/// What the guest finds on its receive ring for one chain: a frame with
/// its `num_buffers`, the further buffers of a merged frame, or a chain
/// returned empty.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Frame(u16, Vec<u8>),
    Empty,
}

/// Random bursts for the guest against a model that places one packet at
/// a time: what arrives, in which buffers, what is dropped as too long
/// and what stays with the caller when the ring runs out.
fn random_bursts_for_the_guest(want: u64, seed: u64) {
    let mergeable = want & feature(VIRTIO_NET_F_MRG_RXBUF) != 0;
    let pool = test_pool(1023);
    let path = socket_path();
    let mut port = vhost_port(&format!("vhost:path={}", path.display()), &pool);
    port.start().unwrap();
    let mut guest = Guest::connect(&path, want);
    let hdr = guest.hdr_len();
    let mut random = Random(seed);
    let mut burst: Burst = Burst::new();
    // The model: the caller's packets not yet taken, the buffers posted
    // and not yet taken (their lengths, in ring order), what the guest
    // must find.
    let mut pending: std::collections::VecDeque<Vec<u8>> = Default::default();
    let mut posted: std::collections::VecDeque<u32> = Default::default();
    let mut expected = Vec::new();
    let (mut found, mut sent, mut too_long, mut waited) = (Vec::new(), 0u64, 0u64, 0u64);
    for round in 0..80u32 {
        // Fewer buffers in flight than the guest has slots for.
        let buffers = random.range(0, 24).min(150 - posted.len());
        let len = [256, 1024, BUF_LEN][random.range(0, 2)];
        guest.post_rx(buffers, len);
        posted.extend(std::iter::repeat_n(len, buffers));
        while burst.len() < burst.capacity() && random.range(0, 4) != 0 {
            let frame = test_frame([2; 6], 6, round, random.range(60, 3000));
            burst.push(chained(&pool, &frame)).unwrap();
            pending.push_back(frame);
        }
        let before = burst.len();
        let taken = port.tx_queue(0).unwrap().tx_burst(&mut burst);
        // One packet at a time, as the model places them.
        let mut model_taken = 0;
        while let Some(frame) = pending.front() {
            let need = (hdr + frame.len()) as u64;
            let (mut have, mut chains) = (0u64, 0usize);
            while have < need && chains < posted.len() && (chains == 0 || mergeable) {
                have += u64::from(posted[chains]);
                chains += 1;
            }
            if chains == 0 {
                break;
            }
            if have < need && mergeable && chains == posted.len() {
                // Too few buffers for the frame yet: they stay posted and
                // the packet waits with the caller.
                waited += 1;
                break;
            }
            posted.drain(..chains);
            let frame = pending.pop_front().unwrap();
            model_taken += 1;
            if have < need {
                too_long += 1;
                expected.extend(std::iter::repeat_with(|| Found::Empty).take(chains));
            } else {
                sent += 1;
                expected.push(Found::Frame(chains as u16, frame));
            }
        }
        assert_eq!(taken, model_taken, "round {round}");
        assert_eq!(burst.len(), before - taken);
        // What the guest finds: frames reassembled from their buffers.
        while let Some(bytes) = guest.take_rx() {
            if bytes.is_empty() {
                found.push(Found::Empty);
                continue;
            }
            let num_buffers = u16::from_le_bytes([bytes[10], bytes[11]]);
            let mut frame = bytes[hdr..].to_vec();
            for _ in 1..num_buffers {
                frame.extend(guest.take_rx().expect("every buffer the header counts"));
            }
            found.push(Found::Frame(num_buffers, frame));
        }
    }
    assert!(found == expected, "every packet placed as one at a time");
    // Mergeable buffers hold any frame here, given time; without them a
    // frame longer than one buffer is dropped.
    assert!(
        sent > 100
            && if mergeable {
                waited > 0 && too_long == 0
            } else {
                too_long > 0
            },
        "{sent} sent, {too_long} too long, {waited} waited for buffers"
    );
    let stats = port.stats();
    assert_eq!(stats.tx_packets, sent);
    assert_eq!(stats.tx_errors, too_long);
    assert_eq!(xstat(&port, "tx_too_long_errors"), too_long);
    drop(burst);
    drop(guest);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn random_bursts_for_the_guest_match_one_packet_at_a_time() {
    random_bursts_for_the_guest(ALL, 0x2545_f491_4f6c_dd1d);
    random_bursts_for_the_guest(
        ALL & !feature(VIRTIO_NET_F_MRG_RXBUF),
        0x1234_5678_9abc_def1,
    );
}
