//! Mbuf tests: layout, accessors, clones, chains, external buffers, bursts,
//! and random operation sequences that must end with the pool full.

use std::mem::offset_of;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;

use super::layout::offset;
use super::*;
use crate::mempool::Elem;
use crate::test_support::{TestPool, assert_pool_full, test_pool};

/// The own buffer of every element follows from the element and the pool,
/// as a free that restores it without reading the header's second line
/// (`pagepool::detach_frag_own`) assumes.
#[test]
fn own_buffers_follow_from_the_element_and_the_pool() {
    let pool = TestPool::new(63).headroom(64).data_room(200).build();
    let all: Vec<Mbuf> = (0..63).map(|_| pool.alloc().unwrap()).collect();
    for m in &all {
        let e = m.as_header_ptr();
        // SAFETY: a header we hold, read only.
        let h = unsafe { &*e };
        let elem = Elem::from_ptr(NonNull::new(e.cast::<u8>()).unwrap());
        assert_eq!(h.own_buf_addr, e.cast::<u8>().wrapping_add(HEADER_SIZE));
        assert_eq!(
            h.own_buf_iova,
            pool.mempool().iova(elem) + HEADER_SIZE as u64
        );
        assert_eq!(h.own_buf_len, 64 + 200);
    }
    drop(all);
    assert_pool_full(&pool);
}

#[test]
fn header_layout_matches_the_documented_offsets() {
    assert_eq!(std::mem::size_of::<MbufHeader>(), 128);
    assert_eq!(std::mem::align_of::<MbufHeader>(), 64);
    assert_eq!(offset_of!(MbufHeader, buf_addr), offset::BUF_ADDR);
    assert_eq!(offset_of!(MbufHeader, buf_iova), offset::BUF_IOVA);
    assert_eq!(offset_of!(MbufHeader, data_off), offset::DATA_OFF);
    assert_eq!(offset_of!(MbufHeader, data_off), offset::REARM_DATA);
    assert_eq!(offset_of!(MbufHeader, refcnt), offset::REFCNT);
    assert_eq!(offset_of!(MbufHeader, nb_segs), offset::NB_SEGS);
    assert_eq!(offset_of!(MbufHeader, port), offset::PORT);
    assert_eq!(offset_of!(MbufHeader, ol_flags), offset::OL_FLAGS);
    assert_eq!(offset_of!(MbufHeader, packet_type), offset::PACKET_TYPE);
    assert_eq!(offset_of!(MbufHeader, pkt_len), offset::PKT_LEN);
    assert_eq!(offset_of!(MbufHeader, data_len), offset::DATA_LEN);
    assert_eq!(offset_of!(MbufHeader, vlan_tci), offset::VLAN_TCI);
    assert_eq!(offset_of!(MbufHeader, rss_hash), offset::RSS_HASH);
    assert_eq!(offset_of!(MbufHeader, fdir_id), offset::FDIR_ID);
    assert_eq!(
        offset_of!(MbufHeader, vlan_tci_outer),
        offset::VLAN_TCI_OUTER
    );
    assert_eq!(offset_of!(MbufHeader, buf_len), offset::BUF_LEN);
    assert_eq!(offset_of!(MbufHeader, udata64), offset::UDATA64);
    assert_eq!(offset_of!(MbufHeader, next), offset::NEXT);
    assert_eq!(offset_of!(MbufHeader, pool), offset::POOL);
    assert_eq!(offset_of!(MbufHeader, tx_offload), offset::TX_OFFLOAD);
    assert_eq!(offset_of!(MbufHeader, shinfo), offset::SHINFO);
    assert_eq!(offset_of!(MbufHeader, frag_target), offset::FRAG_TARGET);
    // Hot Rx fields in the first cache line, and what arming and freeing a
    // page fragment touch (buffer fields, external-buffer word, page
    // target); chains, Tx offloads and the application's in the second.
    for off in [
        offset::BUF_ADDR,
        offset::BUF_IOVA,
        offset::REARM_DATA,
        offset::OL_FLAGS,
        offset::PKT_LEN,
        offset::DATA_LEN,
        offset::RSS_HASH,
        offset::VLAN_TCI,
        offset::BUF_LEN,
        offset::SHINFO,
        offset::FRAG_TARGET,
    ] {
        assert!(off < 64);
    }
    for off in [
        offset::NEXT,
        offset::POOL,
        offset::TX_OFFLOAD,
        offset::UDATA64,
        offset::FDIR_ID,
    ] {
        assert!((64..128).contains(&off));
    }
    // The rearm word is one aligned 8-byte word.
    assert_eq!(offset::REARM_DATA % 8, 0);
    assert_eq!(offset::PORT + 2 - offset::REARM_DATA, 8);
}

#[test]
fn rearm_word_is_one_store_of_the_four_fields() {
    let pool = test_pool(7);
    let mut m = pool.alloc().unwrap();
    let rearm = pool.rearm_data(3);
    // SAFETY: fresh, unshared buffer.
    unsafe { MbufHeader::rearm_ptr(m.as_header_ptr()).write(rearm) };
    assert_eq!(
        (m.headroom(), m.refcnt(), m.nb_segs(), m.port()),
        (DEFAULT_HEADROOM, 1, 1, 3)
    );
    m.set_port(9).unwrap();
    // The template word writes the same four fields in one store.
    let template = pool.rearm_data(5).word();
    // SAFETY: fresh, unshared buffer.
    unsafe { &mut *m.as_header_ptr() }.rearm_word(template);
    assert_eq!(
        (m.headroom(), m.refcnt(), m.nb_segs(), m.port()),
        (DEFAULT_HEADROOM, 1, 1, 5)
    );
    drop(m);
    assert_pool_full(&pool);
}

#[test]
fn buffer_geometry_and_iova() {
    let pool = TestPool::new(15).headroom(64).data_room(1000).build();
    let m = pool.alloc().unwrap();
    assert_eq!((m.headroom(), m.tailroom(), m.buf_len()), (64, 1000, 1064));
    let hdr_addr = m.header() as *const MbufHeader as usize;
    let base = pool.mempool().region().base().as_ptr() as usize;
    assert_eq!(m.data_iova(), (hdr_addr - base + HEADER_SIZE + 64) as u64);
    assert_eq!(m.header().buf_addr as usize, hdr_addr + HEADER_SIZE);
    assert!(pool.owns(&m));
    drop(m);
    assert_pool_full(&pool);
}

#[test]
fn prepend_append_adj_trim() {
    let pool = test_pool(7);
    let mut m = pool.alloc().unwrap();
    m.append(4).unwrap().copy_from_slice(b"abcd");
    m.prepend(2).unwrap().copy_from_slice(b"xy");
    assert_eq!(m.data(), b"xyabcd");
    assert_eq!((m.pkt_len(), m.data_len()), (6, 6));
    m.adj(1).unwrap();
    m.trim(2).unwrap();
    assert_eq!(m.data(), b"yab");
    m.data_mut().unwrap()[0] = b'Y';
    assert_eq!(m.data(), b"Yab");
    // Errors name the sizes and change nothing.
    let e = m.prepend(1000).unwrap_err();
    assert!(
        matches!(
            e,
            MbufError::NoHeadroom {
                need: 1000,
                have: 127
            }
        ),
        "{e}"
    );
    assert!(matches!(
        m.append(5000),
        Err(MbufError::NoTailroom { need: 5000, .. })
    ));
    assert!(matches!(
        m.adj(4),
        Err(MbufError::TooShort { need: 4, have: 3 })
    ));
    assert!(matches!(
        m.trim(4),
        Err(MbufError::TooShort { need: 4, have: 3 })
    ));
    assert_eq!(m.data(), b"Yab");
    drop(m);
    assert_pool_full(&pool);
}

#[test]
fn alloc_resets_what_the_last_user_left() {
    let pool = test_pool(1);
    let mut m = pool.alloc().unwrap();
    m.append(100).unwrap();
    m.adj(10).unwrap();
    m.set_ol_flags(ol::TX_IP_CKSUM).unwrap();
    m.set_rss_hash(7).unwrap();
    m.set_port(2).unwrap();
    drop(m);
    let m = pool.alloc().unwrap();
    assert_eq!(
        (m.pkt_len(), m.data_len(), m.headroom()),
        (0, 0, DEFAULT_HEADROOM)
    );
    assert_eq!((m.ol_flags(), m.rss_hash(), m.port()), (0, 0, PORT_NONE));
    drop(m);
    assert_pool_full(&pool);
}

#[test]
fn clones_share_the_buffer_and_block_writes() {
    let pool = test_pool(3);
    let mut m = pool.alloc_from_slice(b"hello").unwrap();
    let clone = m.clone();
    assert_eq!((m.refcnt(), clone.refcnt()), (2, 2));
    assert!(m.is_shared());
    assert!(matches!(m.data_mut(), Err(MbufError::Shared)));
    assert!(matches!(m.append(1), Err(MbufError::Shared)));
    assert!(matches!(m.set_port(1), Err(MbufError::Shared)));
    assert_eq!(clone.data(), b"hello");
    // Dropping one reference does not free the buffer.
    drop(clone);
    assert_eq!(pool.available(), 2);
    assert_eq!(m.refcnt(), 1);
    m.data_mut().unwrap()[0] = b'j';
    // A clone sent to another thread and dropped there.
    let clone = m.clone();
    std::thread::spawn(move || assert_eq!(clone.data(), b"jello"))
        .join()
        .unwrap();
    assert_eq!(m.refcnt(), 1);
    drop(m);
    assert_pool_full(&pool);
}

#[test]
fn chains_carry_length_and_free_every_segment() {
    let pool = test_pool(8);
    let mut head = pool.alloc_from_slice(b"one-").unwrap();
    let mut tail = pool.alloc_from_slice(b"two-").unwrap();
    tail.chain(pool.alloc_from_slice(b"three").unwrap())
        .unwrap();
    head.chain(tail).unwrap();
    assert_eq!(
        (head.nb_segs(), head.pkt_len(), head.data_len()),
        (3, 13, 4)
    );
    assert_eq!(head.to_vec(), b"one-two-three");
    assert_eq!(head.segments().count(), 3);
    // append/trim act on the last segment.
    head.append(1).unwrap().copy_from_slice(b"!");
    head.trim(2).unwrap();
    assert_eq!(head.to_vec(), b"one-two-thre");
    assert_eq!(pool.available(), 5);
    // A shared tail is refused and given back.
    let shared_tail = pool.alloc().unwrap();
    let tail_clone = shared_tail.clone();
    let (err, shared_tail) = head.chain(shared_tail).unwrap_err();
    assert!(matches!(err, MbufError::Shared));
    drop((shared_tail, tail_clone));
    // A clone of the chain keeps every segment alive.
    let clone = head.clone();
    drop(head);
    assert_eq!(pool.available(), 5);
    assert_eq!(clone.to_vec(), b"one-two-thre");
    drop(clone);
    assert_pool_full(&pool);
}

static EXT_FREED: AtomicUsize = AtomicUsize::new(0);

fn ext_free(buf: NonNull<u8>, opaque: *mut ()) {
    // SAFETY: `opaque` is the `Box<[u8]>` leaked by the test; the buffer is
    // its start.
    let b = unsafe { Box::from_raw(opaque as *mut [u8; 256]) };
    assert_eq!(b.as_ptr(), buf.as_ptr().cast_const());
    EXT_FREED.fetch_add(1, Ordering::SeqCst);
}

/// An external buffer of 256 bytes on the heap and its shared info, leaked
/// (it lives for ever); [`ext_free`] frees the buffer when the last mbuf
/// attached to it lets go.
fn leaked_ext_buffer() -> (NonNull<u8>, &'static ExtSharedInfo) {
    let mem: *mut [u8; 256] = Box::into_raw(Box::new([0u8; 256]));
    // SAFETY: `ext_free` frees exactly that box, once.
    let info = Box::leak(Box::new(unsafe {
        ExtSharedInfo::new(ext_free, mem.cast())
    }));
    (NonNull::new(mem.cast::<u8>()).unwrap(), info)
}

#[test]
fn external_buffer_is_freed_by_the_last_mbuf_and_own_buffer_restored() {
    let pool = test_pool(4);
    let (buf, info) = leaked_ext_buffer();
    let info_ptr = NonNull::from(info);
    let mut a = pool.alloc().unwrap();
    let mut b = pool.alloc().unwrap();
    let own = a.header().buf_addr;
    // SAFETY: the box lives until `ext_free`; `info` is leaked (lives forever).
    unsafe {
        a.attach_extbuf(buf, 0x1000, 256, 16, info_ptr).unwrap();
        b.attach_extbuf(buf, 0x1000, 256, 16, info_ptr).unwrap();
    }
    assert_eq!(info.refcnt(), 2);
    assert!(
        a.has_extbuf() && a.is_shared(),
        "data shared via the ext buffer"
    );
    assert!(a.data_mut().is_err());
    assert_eq!((a.headroom(), a.data_iova()), (16, 0x1010));
    let before = EXT_FREED.load(Ordering::SeqCst);
    drop(b);
    assert_eq!(EXT_FREED.load(Ordering::SeqCst), before);
    a.append(3).unwrap().copy_from_slice(b"ext");
    assert_eq!(a.data(), b"ext");
    drop(a);
    assert_eq!(EXT_FREED.load(Ordering::SeqCst), before + 1);
    assert_pool_full(&pool);
    // Every header went back with its own buffer (right after the header).
    let mut all: Burst = Burst::new();
    pool.alloc_bulk(&mut all, 4).unwrap();
    assert!(all.iter().any(|m| m.header().buf_addr == own));
    for m in &all {
        let hdr = m.header() as *const MbufHeader as usize;
        assert_eq!(m.header().buf_addr as usize, hdr + HEADER_SIZE);
        assert!(!m.has_extbuf());
    }
    drop(all);
    assert_pool_full(&pool);
}

#[test]
fn the_external_flag_follows_the_attachment_and_nothing_else() {
    use super::layout::ol;
    let pool = test_pool(4);
    let (buf, info) = leaked_ext_buffer();
    let info_ptr = NonNull::from(info);
    let mut a = pool.alloc().unwrap();
    a.append(4).unwrap();
    // A caller cannot set it on a plain mbuf ...
    a.set_ol_flags(ol::EXTERNAL | ol::RX_VLAN).unwrap();
    assert_eq!(a.ol_flags(), ol::RX_VLAN);
    assert!(!a.has_extbuf() && !a.is_shared());
    // The direct data is the data, while unshared.
    let own = a.data().as_ptr();
    assert_eq!(
        a.direct_data_mut().map(|d| (d.as_ptr(), d.len())),
        Some((own, 4))
    );
    let clone = a.try_clone().unwrap();
    assert!(a.direct_data_mut().is_none());
    drop(clone);
    // SAFETY: the box lives until `ext_free`; `info` is leaked.
    unsafe { a.attach_extbuf(buf, 0x1000, 256, 16, info_ptr).unwrap() };
    assert_eq!(a.ol_flags(), ol::RX_VLAN | ol::EXTERNAL);
    // An external buffer is writable through `data_mut` alone.
    assert!(a.data_mut().is_ok() && a.direct_data_mut().is_none());
    // ... nor clear it on an attached one; a device's write-back keeps it.
    a.set_ol_flags(0).unwrap();
    assert_eq!(a.ol_flags(), ol::EXTERNAL);
    a.header_mut().set_rx(ol::RX_IP_CKSUM_GOOD, 0, 0, 0, 0);
    assert_eq!(a.ol_flags(), ol::RX_IP_CKSUM_GOOD | ol::EXTERNAL);
    assert!(a.has_extbuf() && !a.is_shared());
    // A second attachment makes the data shared: `is_shared` reads the
    // shared info because the flag says there is one.
    let mut b = pool.alloc().unwrap();
    // SAFETY: as above.
    unsafe { b.attach_extbuf(buf, 0x1000, 256, 16, info_ptr).unwrap() };
    assert!(a.is_shared() && a.data_mut().is_err());
    drop(b);
    assert!(!a.is_shared());
    drop(a);
    // The header went home without the flag.
    let mut all: Burst = Burst::new();
    pool.alloc_bulk(&mut all, 4).unwrap();
    assert!(all.iter().all(|m| m.ol_flags() == 0 && !m.has_extbuf()));
    drop(all);
    assert_pool_full(&pool);
}

#[test]
fn burst_push_pop_drain_retain_and_drop_free_everything() {
    let pool = test_pool(40);
    let mut b: Burst = Burst::new();
    pool.alloc_bulk(&mut b, 10).unwrap();
    for (i, m) in b.iter_mut().enumerate() {
        m.append(1).unwrap()[0] = i as u8;
    }
    // The driver took 4 from the front; 2 of them were not consumed by the
    // caller and are freed when the iterator goes.
    let mut d = b.drain_front(4);
    let first = d.next().unwrap();
    let second = d.next().unwrap();
    drop(d);
    assert_eq!((first.data()[0], second.data()[0]), (0, 1));
    assert_eq!(b.len(), 6);
    assert_eq!(b[0].data()[0], 4);
    assert_eq!(pool.available(), 40 - 8);
    b.retain(|m| m.data()[0] % 2 == 0);
    let kept: Vec<u8> = b.iter().map(|m| m.data()[0]).collect();
    assert_eq!(kept, vec![4, 6, 8]);
    let last = b.pop().unwrap();
    assert_eq!(last.data()[0], 8);
    assert!(b.push(last).is_ok());
    // Over capacity: all or none.
    assert!(matches!(
        pool.alloc_bulk(&mut b, 30),
        Err(MbufError::BurstFull {
            requested: 30,
            free: 29
        })
    ));
    drop((first, second));
    drop(b);
    assert_pool_full(&pool);
}

#[test]
fn capped_view_limits_room_and_shares_the_content() {
    let pool = test_pool(127);
    let mut burst: Burst<64> = Burst::new();
    pool.alloc_bulk(burst.capped(16), 16).unwrap();
    assert!(
        pool.alloc_bulk(burst.capped(16), 1).is_err(),
        "the view is full"
    );
    assert_eq!((burst.len(), burst.free()), (16, 48));
    {
        let view = burst.capped(20);
        assert_eq!((view.len(), view.capacity(), view.free()), (16, 20, 4));
        let sent: Vec<Mbuf> = view.drain_front(10).collect();
        assert_eq!(view.len(), 6);
        drop(sent);
        view.truncate(2);
    }
    assert_eq!(burst.len(), 2);
    assert_eq!(burst.capped(0).capacity(), 2, "never below len");
    assert_eq!(
        burst.capped(1000).capacity(),
        64,
        "never above the capacity"
    );
    drop(burst);
    assert_pool_full(&pool);
}

#[test]
fn alloc_bulk_is_all_or_nothing_when_the_pool_runs_dry() {
    let pool = test_pool(20);
    let mut b: Burst<64> = Burst::new();
    assert!(pool.alloc_bulk(&mut b, 21).is_err());
    assert!(b.is_empty());
    assert_pool_full(&pool);
    pool.alloc_bulk(&mut b, 20).unwrap();
    assert!(pool.alloc().is_none());
    b.clear();
    assert_pool_full(&pool);
}

#[test]
fn bursts_mixing_pools_return_each_buffer_home() {
    let pool = test_pool(10);
    let other = test_pool(10);
    let mut b: Burst = Burst::new();
    for i in 0..20 {
        let m = if i % 3 == 0 {
            pool.alloc()
        } else {
            other.alloc()
        };
        if let Some(m) = m {
            b.push(m).unwrap();
        }
    }
    let extra = b[0].clone();
    drop(b);
    assert_eq!(pool.available() + other.available(), 19);
    drop(extra);
    assert_pool_full(&pool);
    assert_pool_full(&other);
}

#[test]
fn bad_pool_configurations_are_errors() {
    let bad = |headroom, data_room| {
        MbufPool::new(MbufPoolConfig {
            size: 7,
            cache_size: 0,
            headroom,
            data_room,
            ..Default::default()
        })
        .unwrap_err()
        .to_string()
    };
    assert!(bad(128, 0).contains("data room 0"));
    let m = bad(1000, 65000);
    assert!(m.contains("66000"), "{m}");
    let e = MbufPool::new(MbufPoolConfig {
        size: 0,
        ..Default::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("size 0"));
}

/// One step of a random mbuf program.
#[derive(Debug, Clone)]
enum Op {
    Alloc(u8),
    Free(usize),
    Clone(usize),
    Append(usize, u16),
    Prepend(usize, u8),
    Adj(usize, u16),
    Trim(usize, u16),
    Chain(usize, usize),
    BulkToBurst(u8),
    DrainBurst(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u8>().prop_map(Op::Alloc),
        any::<usize>().prop_map(Op::Free),
        any::<usize>().prop_map(Op::Clone),
        (any::<usize>(), 0u16..3000).prop_map(|(i, n)| Op::Append(i, n)),
        (any::<usize>(), 0u8..200).prop_map(|(i, n)| Op::Prepend(i, n)),
        (any::<usize>(), 0u16..300).prop_map(|(i, n)| Op::Adj(i, n)),
        (any::<usize>(), 0u16..300).prop_map(|(i, n)| Op::Trim(i, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Op::Chain(i, j)),
        (0u8..40).prop_map(Op::BulkToBurst),
        (0u8..40).prop_map(Op::DrainBurst),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random sequences of alloc/clone/chain/append/trim/free on a small pool,
    /// against a model of each handle's bytes: contents always match, errors
    /// change nothing, and at the end the pool is full again.
    #[test]
    fn random_sequences_end_with_the_pool_full(ops in proptest::collection::vec(op(), 1..120)) {
        let pool = test_pool(48);
        let mut held: Vec<(Mbuf, Vec<u8>)> = Vec::new();
        let mut burst: Burst = Burst::new();
        for op in ops {
            let pick = |i: usize, n: usize| if n == 0 { None } else { Some(i % n) };
            match op {
                Op::Alloc(b) => {
                    if let Ok(m) = pool.alloc_from_slice(&[b; 3]) {
                        held.push((m, vec![b; 3]));
                    }
                }
                Op::Free(i) => {
                    if let Some(i) = pick(i, held.len()) {
                        held.swap_remove(i);
                    }
                }
                Op::Clone(i) => {
                    if let Some(i) = pick(i, held.len()) {
                        let (m, v) = &held[i];
                        let cloned = (m.clone(), v.clone());
                        held.push(cloned);
                    }
                }
                Op::Append(i, n) => {
                    if let Some(i) = pick(i, held.len()) {
                        let (m, v) = &mut held[i];
                        let before = m.to_vec();
                        match m.append(n as usize) {
                            Ok(s) => {
                                s.fill(n as u8);
                                v.extend(std::iter::repeat_n(n as u8, n as usize));
                            }
                            Err(_) => prop_assert_eq!(m.to_vec(), before),
                        }
                    }
                }
                Op::Prepend(i, n) => {
                    if let Some(i) = pick(i, held.len()) {
                        let (m, v) = &mut held[i];
                        if let Ok(s) = m.prepend(n as usize) {
                            s.fill(0xee);
                            v.splice(0..0, std::iter::repeat_n(0xee, n as usize));
                        }
                    }
                }
                Op::Adj(i, n) => {
                    if let Some(i) = pick(i, held.len()) {
                        let (m, v) = &mut held[i];
                        if m.adj(n as usize).is_ok() {
                            v.drain(..n as usize);
                        }
                    }
                }
                Op::Trim(i, n) => {
                    if let Some(i) = pick(i, held.len()) {
                        let (m, v) = &mut held[i];
                        if m.trim(n as usize).is_ok() {
                            v.truncate(v.len() - n as usize);
                        }
                    }
                }
                Op::Chain(i, j) => {
                    if held.len() >= 2 {
                        let i = i % held.len();
                        let mut j = j % held.len();
                        if i == j {
                            j = (j + 1) % held.len();
                        }
                        let (tail, tv) = held.swap_remove(j);
                        let i = if i == held.len() { j } else { i };
                        let (m, v) = &mut held[i];
                        match m.chain(tail) {
                            Ok(()) => v.extend(tv),
                            Err((_, tail)) => held.push((tail, tv)),
                        }
                    }
                }
                Op::BulkToBurst(n) => {
                    let before = pool.available();
                    if pool.alloc_bulk(&mut burst, n as usize).is_err() {
                        prop_assert_eq!(pool.available(), before);
                    }
                }
                Op::DrainBurst(n) => {
                    let _ = burst.drain_front(n as usize).take(n as usize / 2).count();
                }
            }
            for (m, v) in &held {
                prop_assert_eq!(&m.to_vec(), v);
                prop_assert_eq!(m.pkt_len() as usize, v.len());
            }
            let s = pool.stats();
            prop_assert_eq!(s.available + s.in_use, s.size);
        }
        drop(held);
        drop(burst);
        prop_assert!(pool.is_full());
    }
}

// ---------------------------------------------------------------------------
// Forgotten drains and panicking `retain` callbacks.

/// The first byte of an mbuf's data: the id a test tagged it with.
fn id_of(m: &Mbuf) -> usize {
    m.data()[0] as usize
}

/// `n` fresh mbufs in `b`, tagged with ids `first..first + n`.
fn alloc_tagged(pool: &MbufPool, b: &mut BurstSlice, first: usize, n: usize) {
    let base = b.len();
    pool.alloc_bulk(b, n).unwrap();
    for (i, m) in b.iter_mut().skip(base).enumerate() {
        m.append(1).unwrap()[0] = (first + i) as u8;
    }
}

/// `pool` holds exactly its `size` buffers, each once: the free count says so,
/// and allocating all of them at once gives distinct buffers.
fn assert_exactly_full(pool: &MbufPool, size: u32) {
    assert_eq!(pool.available(), size, "free buffers");
    let mut all: Burst<64> = Burst::new();
    pool.alloc_bulk(&mut all, size as usize).unwrap();
    let mut addrs: Vec<usize> = all.raw().iter().map(|e| e.as_ptr() as usize).collect();
    addrs.sort_unstable();
    addrs.dedup();
    assert_eq!(addrs.len(), size as usize, "distinct buffers");
    drop(all);
    assert_pool_full(&pool);
}

/// Mbufs 0..8 in a burst; `drain_front(5)` yields `k` of them and is
/// forgotten; the burst is then used (4 more appended, all read) and
/// dropped. No mbuf comes out of the burst twice, and after the test takes
/// back the mbufs the forgotten iterator leaked, the pool is exactly full.
fn check_forgotten_drain_front(k: usize) {
    const SIZE: u32 = 16;
    let pool = test_pool(SIZE);
    let mut b: Burst = Burst::new();
    alloc_tagged(&pool, &mut b, 0, 8);
    let before: Vec<Elem> = b.raw().to_vec();
    let mut seen = [0usize; 12];
    let mut yielded = Vec::new();
    let mut d = b.drain_front(5);
    for m in d.by_ref().take(k) {
        seen[id_of(&m)] += 1;
        yielded.push(m);
    }
    std::mem::forget(d);
    let kept: Vec<Elem> = b.raw().to_vec();
    alloc_tagged(&pool, &mut b, 8, 4);
    for m in b.iter() {
        seen[id_of(m)] += 1;
    }
    if seen.iter().any(|&s| s > 1) {
        // Dropping them would free an mbuf twice: leak them and fail.
        std::mem::forget((b, yielded));
        panic!("an mbuf came out twice, k = {k}: {seen:?}");
    }
    drop(b);
    drop(yielded);
    // What neither the iterator yielded nor the burst kept is leaked: give
    // it back, so the pool shows any buffer that was freed twice.
    for (i, e) in before.iter().enumerate() {
        if i >= k && !kept.contains(e) {
            // SAFETY: an mbuf allocated above that no handle or burst owns.
            drop(unsafe { Mbuf::from_raw(e.as_non_null().cast()) });
        }
    }
    assert_exactly_full(&pool, SIZE);
}

#[test]
fn a_forgotten_drain_front_yields_no_mbuf_twice() {
    for k in [0, 1, 3, 5] {
        check_forgotten_drain_front(k);
    }
}

/// A `retain` whose callback panics at mbuf `at` of 8 (having dropped the
/// odd ones before it): the burst keeps the even ones before it and every
/// one from it on, in order, and nothing is lost or freed twice.
fn check_panicking_retain(at: usize) {
    const SIZE: u32 = 16;
    let pool = test_pool(SIZE);
    let mut b: Burst = Burst::new();
    alloc_tagged(&pool, &mut b, 0, 8);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        b.retain(|m| {
            let id = id_of(m);
            assert!(id != at, "the callback panics at mbuf {id}");
            id.is_multiple_of(2)
        })
    }));
    assert!(result.is_err());
    let ids: Vec<usize> = b.iter().map(id_of).collect();
    let expected: Vec<usize> = (0..8)
        .filter(|&id| id >= at || id.is_multiple_of(2))
        .collect();
    assert_eq!(ids, expected, "kept after a panic at {at}");
    assert_eq!(pool.available(), SIZE - expected.len() as u32);
    drop(b);
    assert_exactly_full(&pool, SIZE);
}

#[test]
fn a_panicking_retain_callback_keeps_what_it_did_not_judge() {
    for at in [0, 1, 4, 7] {
        check_panicking_retain(at);
    }
}
