//! What the derive emits when the input has mistakes: the errors, plus a minimal
//! `impl Job` so the rest of the user's code (`T::KIND`, `.enqueue(..)`) still type
//! checks and the user sees only the real mistakes, not a cascade.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt as _;
use syn::{Data, DeriveInput, Expr, ExprLit, Lit};

use crate::attr::Entries;
use crate::krate;

/// `compile_error!`s for `error`, and a placeholder impl when one can be written.
pub(crate) fn emit(input: &DeriveInput, error: syn::Error) -> TokenStream {
    let errors = error.to_compile_error();
    let dummy = dummy(input);
    quote!(#errors #dummy)
}

/// `impl Job` with the default options, or nothing for shapes that cannot have one:
/// enums and unions are refused outright (and a placeholder on an enum without serde
/// derives would add `Job`'s serde bound errors to the one that says what to do);
/// generic types would need bounds we cannot guess.
fn dummy(input: &DeriveInput) -> Option<TokenStream> {
    if !matches!(input.data, Data::Struct(_)) || !input.generics.params.is_empty() {
        return None;
    }
    let krate = krate::resolve(crate_override(input).as_ref()).ok()?;
    let ty = &input.ident;
    let kind = ty.unraw().to_string();
    Some(quote! {
        const _: () = {
            use #krate as __lq;

            #[automatically_derived]
            impl __lq::Job for #ty {
                const KIND: &'static str = #kind;
                const OPTIONS: __lq::JobOptions = __lq::JobOptions::DEFAULT;
            }
        };
    })
}

/// The `crate = "..."` path, if the attributes parse far enough to have a valid one.
fn crate_override(input: &DeriveInput) -> Option<syn::Path> {
    let entry = Entries::from_attrs(&input.attrs).ok()?.take("crate")?;
    match entry.value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => s.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn emit_str(input: DeriveInput) -> String {
        emit(
            &input,
            syn::Error::new(proc_macro2::Span::call_site(), "boom"),
        )
        .to_string()
    }

    #[test]
    fn errors_come_with_a_placeholder_impl() {
        let out = emit_str(parse_quote!(
            #[job(crate = "::lq_core", max_attempts = 0)]
            struct A;
        ));
        assert!(
            out.starts_with(":: core :: compile_error ! { \"boom\" }"),
            "{out}"
        );
        assert!(out.contains("impl __lq :: Job for A"), "{out}");
        assert!(out.contains("use :: lq_core as __lq ;"), "{out}");
        assert!(out.contains("__lq :: JobOptions :: DEFAULT"), "{out}");
        let out = emit_str(parse_quote!(
            #[job(crate = "my::lq", queue = "a b")]
            struct A;
        ));
        assert!(out.contains("use my :: lq as __lq ;"), "{out}");
    }

    #[test]
    fn no_placeholder_for_enums_unions_and_generics() {
        assert!(!emit_str(parse_quote!(union U { a: u8 })).contains("impl"));
        assert!(!emit_str(parse_quote!(
            enum E {
                A,
            }
        ))
        .contains("impl"));
        assert!(!emit_str(parse_quote!(
            struct G<T>(T);
        ))
        .contains("impl"));
    }
}
