//! Locks that keep working after a panic elsewhere.
//!
//! A std lock is poisoned when a thread panics while holding it. Every lock
//! of this crate guards data that is consistent between statements (a map,
//! a slot, a counter), so a poisoned lock is taken as it is instead of
//! spreading one panic to every later caller.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, poisoned or not.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes a shared lock of `rw`, poisoned or not.
pub fn read<T: ?Sized>(rw: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rw.read().unwrap_or_else(PoisonError::into_inner)
}

/// Takes the exclusive lock of `rw`, poisoned or not.
pub fn write<T: ?Sized>(rw: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rw.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_still_usable() {
        let mutex = Mutex::new(1);
        let rw = RwLock::new(2);
        std::thread::scope(|s| {
            let panicked = s
                .spawn(|| {
                    let _m = mutex.lock();
                    let _w = rw.write();
                    panic!("poisons both locks");
                })
                .join();
            assert!(panicked.is_err());
        });
        assert!(mutex.is_poisoned() && rw.is_poisoned());
        *lock(&mutex) += 1;
        *write(&rw) += 1;
        assert_eq!((*lock(&mutex), *read(&rw)), (2, 3));
    }
}
