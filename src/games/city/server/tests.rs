use super::*;

/// A burst of 2,000 packets queued at once, all sent: the outbox keeps
/// `OUTBOX_POOL_KEEP` buffers for the next burst, not one per packet of this one.
#[test]
fn outbox_keeps_a_bounded_pool_after_a_deep_burst() {
    let mut ob = Outbox::default();
    for i in 0..2_000u64 {
        let mut open = vec![0u8; 1_200];
        ob.flush(ConnId(i), i % 2 == 0, &mut open);
        assert!(open.is_empty(), "the open packet moved to the queue");
    }
    assert_eq!(ob.queue.len(), 2_000);
    while let Some((_, _, bytes)) = ob.queue.pop_front() {
        ob.recycle(bytes);
    }
    assert_eq!(ob.pool.len(), OUTBOX_POOL_KEEP);
}
