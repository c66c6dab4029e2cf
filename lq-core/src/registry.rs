//! The link-time registry of job types, filled by `#[derive(Job)]` through `inventory`.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;

use crate::{Error, JobContext, JobError, JobOptions};

/// Decodes a JSON payload into its type and returns the future of its `perform`.
pub type PerformFn =
    fn(&str, JobContext) -> Result<BoxFuture<'static, Result<(), JobError>>, serde_json::Error>;

/// One derived job type, as the derive registers it.
#[derive(Debug)]
pub struct JobDescriptor {
    /// The kind stored in rows.
    pub kind: &'static str,
    /// The Rust path of the type, for messages.
    pub type_name: &'static str,
    /// Its `#[job(...)]` settings.
    pub options: &'static JobOptions,
    /// Its `perform`, when the type implements [`crate::Perform`].
    pub handler: fn() -> Option<PerformFn>,
}

inventory::collect!(JobDescriptor);

/// Every job type linked into this binary, keyed by kind.
///
/// Building it fails when two types declare one kind. A crate whose jobs never show
/// up here was dropped by the linker: reference it with `use my_jobs as _;`.
#[derive(Debug, Clone)]
pub struct Registry {
    by_kind: BTreeMap<&'static str, &'static JobDescriptor>,
}

impl Registry {
    /// Collects the registered types, refusing duplicate kinds.
    pub fn collect() -> Result<Self, Error> {
        let mut by_kind: BTreeMap<&'static str, &'static JobDescriptor> = BTreeMap::new();
        for d in inventory::iter::<JobDescriptor> {
            if let Some(prev) = by_kind.insert(d.kind, d) {
                let (first, second) = ordered(prev.type_name, d.type_name);
                return Err(Error::DuplicateKind {
                    kind: d.kind,
                    first,
                    second,
                });
            }
        }
        Ok(Self { by_kind })
    }

    /// The type registered for `kind`.
    pub fn get(&self, kind: &str) -> Option<&'static JobDescriptor> {
        self.by_kind.get(kind).copied()
    }

    /// All registered types, sorted by kind.
    pub fn iter(&self) -> impl Iterator<Item = &'static JobDescriptor> + '_ {
        self.by_kind.values().copied()
    }
}

fn ordered(a: &'static str, b: &'static str) -> (&'static str, &'static str) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}
