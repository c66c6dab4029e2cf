//! The derive's input: a non-generic struct, its name and its fields.

use syn::ext::IdentExt as _;
use syn::spanned::Spanned as _;
use syn::{Data, DeriveInput, Ident};

/// The fields of the job struct, as `unique_key` templates can name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fields {
    /// `struct S { a: T, b: U }`: the field names (raw identifiers unescaped).
    Named(Vec<Ident>),
    /// `struct S(T, U)`: the number of fields.
    Unnamed(usize),
    /// `struct S;`
    Unit,
}

/// A struct that `#[derive(Job)]` accepts.
#[derive(Debug, Clone)]
pub(crate) struct Input<'a> {
    /// The type's name.
    pub(crate) ident: &'a Ident,
    /// Its fields.
    pub(crate) fields: Fields,
}

impl<'a> Input<'a> {
    /// Checks the shape of `input`: a struct without generic parameters.
    pub(crate) fn from_derive(input: &'a DeriveInput) -> syn::Result<Self> {
        let ident = &input.ident;
        let fields = match &input.data {
            Data::Struct(s) => match &s.fields {
                syn::Fields::Named(f) => {
                    Fields::Named(f.named.iter().filter_map(|f| f.ident.clone()).collect())
                }
                syn::Fields::Unnamed(f) => Fields::Unnamed(f.unnamed.len()),
                syn::Fields::Unit => Fields::Unit,
            },
            Data::Enum(e) => {
                return Err(syn::Error::new(
                    e.enum_token.span,
                    format!(
                        "`#[derive(Job)]` works on structs only, and `{ident}` is an enum: \
                         wrap it in a struct, e.g. `struct {ident}Job {{ action: {ident} }}`"
                    ),
                ))
            }
            Data::Union(u) => {
                return Err(syn::Error::new(
                    u.union_token.span,
                    format!(
                        "`#[derive(Job)]` works on structs only, and `{ident}` is a union: \
                         a job payload must be a serde struct; use a struct with named fields"
                    ),
                ))
            }
        };
        let only_lifetimes = input
            .generics
            .params
            .iter()
            .all(|p| matches!(p, syn::GenericParam::Lifetime(_)));
        if !input.generics.params.is_empty() && only_lifetimes {
            return Err(syn::Error::new(
                input.generics.params.span(),
                format!(
                    "`#[derive(Job)]` does not support lifetime parameters: a job is stored, then \
                     deserialised on a worker into a value of its own (`Job` requires \
                     `DeserializeOwned + 'static`), so it cannot borrow; remove the lifetime \
                     from `{ident}` and make its fields owned (`String` for `&'a str`, \
                     `Vec<T>` for `&'a [T]`)"
                ),
            ));
        }
        if !input.generics.params.is_empty() {
            return Err(syn::Error::new(
                input.generics.params.span(),
                format!(
                    "`#[derive(Job)]` does not support generic parameters: each job kind names \
                     one concrete type; remove the parameters from `{ident}`, or define one \
                     struct per concrete type"
                ),
            ));
        }
        if let Data::Struct(s) = &input.data {
            let on_a_field = s.fields.iter().flat_map(|f| &f.attrs);
            if let Some(attr) = on_a_field.into_iter().find(|a| a.path().is_ident("job")) {
                return Err(syn::Error::new_spanned(
                    attr,
                    format!(
                        "`#[job(...)]` goes on the struct, not on a field: move it above \
                         `struct {ident}`; a `unique_key` names fields in its template, like \
                         \"order:{{order_id}}\""
                    ),
                ));
            }
        }
        Ok(Self { ident, fields })
    }

    /// The type's name as written, without a raw `r#` prefix.
    pub(crate) fn name(&self) -> String {
        self.ident.unraw().to_string()
    }
}

impl Fields {
    /// The names a template may use, for messages: `order_id`, or `0`, `1` for tuples.
    pub(crate) fn names(&self) -> Vec<String> {
        match self {
            Fields::Named(names) => names.iter().map(|i| i.unraw().to_string()).collect(),
            Fields::Unnamed(n) => (0..*n).map(|i| i.to_string()).collect(),
            Fields::Unit => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn check(input: DeriveInput) -> Result<Fields, String> {
        Input::from_derive(&input)
            .map(|i| i.fields)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn accepts_every_struct_shape() {
        let named = check(parse_quote!(
            struct A {
                r#type: u8,
                b: u8,
            }
        ))
        .unwrap();
        assert_eq!(
            Fields::Named(vec![parse_quote!(r#type), parse_quote!(b)]),
            named
        );
        assert_eq!(named.names(), ["type", "b"]);
        assert_eq!(
            check(parse_quote!(
                struct A(u8, u8);
            )),
            Ok(Fields::Unnamed(2))
        );
        assert_eq!(
            check(parse_quote!(
                struct A;
            )),
            Ok(Fields::Unit)
        );
    }

    #[test]
    fn rejects_enums_unions_and_generics() {
        let e = check(parse_quote!(
            enum E {
                A,
            }
        ))
        .unwrap_err();
        assert!(e.contains("`E` is an enum"), "{e}");
        let e = check(parse_quote!(union U { a: u8 })).unwrap_err();
        assert!(e.contains("`U` is a union"), "{e}");
        let e = check(parse_quote!(
            struct G<T> {
                t: T,
            }
        ))
        .unwrap_err();
        assert!(e.contains("generic parameters"), "{e}");
        let e = check(parse_quote!(
            struct L<'a> {
                t: &'a str,
            }
        ))
        .unwrap_err();
        assert!(e.contains("does not support lifetime parameters"), "{e}");
        assert!(e.contains("`String` for `&'a str`"), "{e}");
        let e = check(parse_quote!(
            struct M<'a, T> {
                t: &'a T,
            }
        ))
        .unwrap_err();
        assert!(e.contains("generic parameters"), "{e}");
    }
}
