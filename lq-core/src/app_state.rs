//! [`AppState`]: the typed values shared with every job (pools, clients, config).

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    sync::Arc,
};

/// A map from type to one shared value of that type; cheap to clone.
///
/// ```
/// use lq_core::AppState;
/// let mut s = AppState::default();
/// s.insert(String::from("smtp://localhost"));
/// assert_eq!(s.get::<String>().map(String::as_str), Some("smtp://localhost"));
/// assert!(s.get::<u32>().is_none());
/// ```
#[derive(Clone, Default)]
pub struct AppState {
    values: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl AppState {
    /// Adds `value`, replacing an earlier value of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        Arc::make_mut(&mut self.values).insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if one was inserted.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("values", &self.values.len())
            .finish()
    }
}
