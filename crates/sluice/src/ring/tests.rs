//! Unit tests of every mode and of the wrap.

use super::*;

fn roundtrip<P: SyncMode, C: SyncMode>() {
    let (mut p, mut c) = Ring::<u32>::new::<P, C>(8).unwrap();
    // Walk the indices around the ring several times with odd-sized batches
    // so every batch position straddles the wrap at some point.
    let mut next_in = 0u32;
    let mut next_out = 0u32;
    for round in 0..50 {
        let k = (round % 7) + 1;
        let src: Vec<u32> = (next_in..next_in + k).collect();
        let moved = p.enqueue_bulk(&src);
        assert_eq!(moved.n, k as usize);
        next_in += k;
        let mut dst = vec![0u32; k as usize];
        let moved = c.dequeue_bulk(&mut dst);
        assert_eq!(moved.n, k as usize);
        assert_eq!(moved.left, 0);
        for v in dst {
            assert_eq!(v, next_out);
            next_out += 1;
        }
    }
    assert!(c.is_empty());
}

#[test]
fn every_mode_round_trips_across_the_wrap() {
    roundtrip::<Single, Single>();
    roundtrip::<Single, Multi>();
    roundtrip::<Multi, Single>();
    roundtrip::<Multi, Multi>();
}

fn bulk_is_all_or_nothing<P: SyncMode, C: SyncMode>() {
    let (mut p, mut c) = Ring::<u8>::new::<P, C>(4).unwrap();
    assert_eq!(p.enqueue_bulk(&[1, 2, 3]), Moved { n: 3, left: 1 });
    assert_eq!(p.enqueue_bulk(&[4, 5]).n, 0);
    assert_eq!(p.enqueue_burst(&[4, 5]), Moved { n: 1, left: 0 });
    assert_eq!(p.push(9), Err(9));
    let mut dst = [0u8; 5];
    assert_eq!(c.dequeue_bulk(&mut dst).n, 0, "bulk must not take 4 of 5");
    assert_eq!(c.dequeue_burst(&mut dst), Moved { n: 4, left: 0 });
    assert_eq!(&dst[..4], &[1, 2, 3, 4]);
    assert_eq!(c.pop(), None);
}

#[test]
fn bulk_all_or_nothing_and_burst_as_many_as_fit() {
    bulk_is_all_or_nothing::<Single, Single>();
    bulk_is_all_or_nothing::<Single, Multi>();
    bulk_is_all_or_nothing::<Multi, Single>();
    bulk_is_all_or_nothing::<Multi, Multi>();
}

#[test]
fn bad_capacities_are_errors_naming_the_value() {
    assert_eq!(Ring::<u8>::spsc(0).unwrap_err(), RingError::ZeroCapacity);
    let err = Ring::<u8>::mpmc(12).unwrap_err();
    assert_eq!(err, RingError::NotPowerOfTwo(12));
    assert!(err.to_string().contains("12"));
    assert!(matches!(
        Ring::<u8>::spsc(MAX_CAPACITY * 2),
        Err(RingError::TooLarge(_))
    ));
    assert!(Ring::<u8>::spsc(1).is_ok());
}

#[test]
fn capacity_one_works() {
    let (mut p, mut c) = Ring::<u8>::mpmc(1).unwrap();
    for i in 0..10 {
        assert!(p.push(i).is_ok());
        assert_eq!(p.push(i), Err(i));
        assert_eq!(c.pop(), Some(i));
    }
}

#[test]
fn non_copy_values_are_moved_and_dropped_exactly_once() {
    let token = std::sync::Arc::new(());
    {
        let (mut p, mut c) = Ring::<std::sync::Arc<()>>::spsc(4).unwrap();
        for _ in 0..4 {
            p.push(token.clone()).unwrap();
        }
        assert_eq!(std::sync::Arc::strong_count(&token), 5);
        drop(c.pop());
        assert_eq!(std::sync::Arc::strong_count(&token), 4);
        // Three left in the ring: dropping both ends drops them.
    }
    assert_eq!(std::sync::Arc::strong_count(&token), 1);
}

#[test]
fn zero_copy_chunks_split_at_the_wrap() {
    let (mut p, mut c) = Ring::<u32>::spsc(8).unwrap();
    // Move the indices to 6 so a 5-slot reservation wraps: 2 + 3.
    assert_eq!(p.enqueue_bulk(&[0; 6]).n, 6);
    assert_eq!(c.dequeue_bulk(&mut [0; 6]).n, 6);
    let mut chunk = p.reserve(5).unwrap();
    let (a, b) = chunk.as_mut_slices();
    assert_eq!((a.len(), b.len()), (2, 3));
    assert_eq!(chunk.fill_from_iter(100..), 5);
    assert!(p.reserve(4).is_none(), "only 3 free");
    let chunk = c.peek(5).unwrap();
    let (a, b) = chunk.as_slices();
    assert_eq!(a, &[100, 101]);
    assert_eq!(b, &[102, 103, 104]);
    chunk.commit(2);
    assert_eq!(c.len(), 3);
    let got: Vec<u32> = c.peek_burst(10).drain().collect();
    assert_eq!(got, vec![102, 103, 104]);
    assert!(c.is_empty());
}

#[test]
fn zero_copy_partial_commit_and_drop_commit_nothing() {
    let (mut p, mut c) = Ring::<u32>::spsc(4).unwrap();
    {
        let chunk = p.reserve_burst(10);
        assert_eq!(chunk.len(), 4);
        // Dropped without commit: nothing published.
    }
    assert!(c.is_empty());
    let chunk = p.reserve(4).unwrap();
    assert_eq!(chunk.copy_from_slice(&[7, 8]), 2);
    assert_eq!(c.len(), 2);
    let mut d = c.peek_burst(4).drain();
    assert_eq!(d.next(), Some(7));
    drop(d); // only 7 consumed
    assert_eq!(c.pop(), Some(8));
}
