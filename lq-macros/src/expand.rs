//! Emits the `impl Job`, the compile-time assertions and the `inventory` registration.

use proc_macro2::{Literal, TokenStream};
use quote::{quote, quote_spanned};

use crate::backoff::BackoffSpec;
use crate::cron::CatchUp;
use crate::duration;
use crate::template::Part;
use crate::valid::JobSpec;

/// The whole expansion for `spec`, reaching litequeue through `krate`.
///
/// The options live in one local constant that both the impl and the registration
/// use, so a type that fails the `Job` supertraits (not serde) gets only those
/// errors, not a second set from projections like `<T as Job>::KIND`.
pub(crate) fn expand(spec: &JobSpec, krate: &TokenStream) -> TokenStream {
    let ty = &spec.ident;
    let kind = &spec.kind;
    let options = options(spec);
    let unique_key = unique_key(spec);
    let type_name = format!("::{}", syn::ext::IdentExt::unraw(ty));
    let cron = spec.cron.as_ref().map(|_| cron_payload(ty));
    let backoff_fn = custom_backoff(spec);
    quote! {
        const _: () = {
            use #krate as __lq;

            #backoff_fn

            const __LQ_OPTIONS: __lq::JobOptions = #options;

            #[automatically_derived]
            impl __lq::Job for #ty {
                const KIND: &'static str = #kind;
                const OPTIONS: __lq::JobOptions = __LQ_OPTIONS;
                #unique_key
            }

            #cron

            fn __lq_handler() -> ::core::option::Option<__lq::PerformFn> {
                #[allow(unused_imports)]
                use __lq::__private::{NoPerform as _, ViaPerform as _};
                (&__lq::__private::Probe::<#ty>::new()).handler()
            }

            __lq::__private::inventory::submit! {
                __lq::JobDescriptor {
                    kind: #kind,
                    type_name: ::core::concat!(::core::module_path!(), #type_name),
                    options: &__LQ_OPTIONS,
                    handler: __lq_handler,
                }
            }
        };
    }
}

/// The `Default` assertion, `__lq_cron_payload` (the `CronSpec::build` of a cron
/// job) and `__lq_cron_unique_key` (its `CronSpec::unique_key`).
///
/// The local traits carry the `__Lq` prefix: the bodies name the user's type, which
/// a local item of the same name (a job called `ViaDefault`) would shadow.
///
/// The payload function picks `default_payload::<T>` by autoref specialisation, so
/// a type without `Default` reports only the readable `assert_cron_default` error
/// (spanned at the type's name) instead of a second, raw `Default` bound error.
fn cron_payload(ty: &syn::Ident) -> TokenStream {
    let assert = quote_spanned!(ty.span()=>
        const _: () = __lq::__private::assert_cron_default::<#ty>();
    );
    quote! {
        #assert

        fn __lq_cron_payload() -> __lq::__private::serde_json::Value {
            trait __LqViaDefault {
                fn payload(&self) -> __lq::__private::serde_json::Value;
            }
            impl<T: __lq::Job + ::core::default::Default> __LqViaDefault for __lq::__private::Probe<T> {
                fn payload(&self) -> __lq::__private::serde_json::Value {
                    __lq::__private::default_payload::<T>()
                }
            }
            trait __LqNoDefault {
                fn payload(&self) -> __lq::__private::serde_json::Value;
            }
            impl<T> __LqNoDefault for &__lq::__private::Probe<T> {
                fn payload(&self) -> __lq::__private::serde_json::Value {
                    __lq::__private::serde_json::Value::Null
                }
            }
            (&__lq::__private::Probe::<#ty>::new()).payload()
        }

        fn __lq_cron_unique_key() -> ::core::option::Option<::std::string::String> {
            trait __LqViaDefault {
                fn key(&self) -> ::core::option::Option<::std::string::String>;
            }
            impl<T: __lq::Job + ::core::default::Default> __LqViaDefault for __lq::__private::Probe<T> {
                fn key(&self) -> ::core::option::Option<::std::string::String> {
                    __lq::__private::default_unique_key::<T>()
                }
            }
            trait __LqNoDefault {
                fn key(&self) -> ::core::option::Option<::std::string::String>;
            }
            impl<T> __LqNoDefault for &__lq::__private::Probe<T> {
                fn key(&self) -> ::core::option::Option<::std::string::String> {
                    ::core::option::Option::None
                }
            }
            (&__lq::__private::Probe::<#ty>::new()).key()
        }
    }
}

/// The `JobOptions` constant.
fn options(spec: &JobSpec) -> TokenStream {
    let queue = &spec.queue;
    let priority = spec.priority;
    let max_attempts = spec.max_attempts;
    let backoff = backoff(&spec.backoff);
    let timeout = match spec.timeout {
        Some(d) => {
            let d = duration::tokens(d);
            quote!(::core::option::Option::Some(#d))
        }
        None => quote!(::core::option::Option::None),
    };
    let lease = match spec.lease {
        Some(d) => duration::tokens(d),
        None => quote!(__lq::DEFAULT_LEASE),
    };
    let cron = match &spec.cron {
        Some(s) => {
            let (expr, tz) = (&s.expr, &s.tz);
            let catch_up = match s.catch_up {
                CatchUp::Once => quote!(__lq::CatchUp::Once),
                CatchUp::Skip => quote!(__lq::CatchUp::Skip),
            };
            quote!(::core::option::Option::Some(__lq::CronSpec {
                expr: #expr,
                tz: #tz,
                catch_up: #catch_up,
                build: __lq_cron_payload,
                unique_key: __lq_cron_unique_key,
            }))
        }
        None => quote!(::core::option::Option::None),
    };
    quote! {
        __lq::JobOptions {
            queue: #queue,
            priority: #priority,
            max_attempts: #max_attempts,
            backoff: #backoff,
            timeout: #timeout,
            lease: #lease,
            cron: #cron,
        }
    }
}

/// The `Backoff` value (a custom function is [`custom_backoff`]'s constant).
fn backoff(spec: &BackoffSpec) -> TokenStream {
    match spec {
        BackoffSpec::Default => quote!(__lq::Backoff::DEFAULT),
        BackoffSpec::Exponential { base, max, jitter } => {
            let (base, max) = (duration::tokens(*base), duration::tokens(*max));
            let jitter = Literal::f64_unsuffixed(*jitter);
            quote!(__lq::Backoff::Exponential { base: #base, max: #max, jitter: #jitter })
        }
        BackoffSpec::Fixed(d) => {
            let d = duration::tokens(*d);
            quote!(__lq::Backoff::Fixed(#d))
        }
        BackoffSpec::Linear { step, max } => {
            let (step, max) = (duration::tokens(*step), duration::tokens(*max));
            quote!(__lq::Backoff::Linear { step: #step, max: #max })
        }
        BackoffSpec::Custom(_) => quote!(__lq::Backoff::Custom(__LQ_BACKOFF_FN)),
    }
}

/// For `backoff = path`, the constant `__LQ_BACKOFF_FN` that [`backoff`] puts in
/// `Backoff::Custom`: the user's function coerced to the `fn(u32) -> Duration`
/// pointer that variant holds.
///
/// The coercion is its own item so that a function of another signature, or a
/// value that is no function, is one "expected fn pointer `fn(u32) -> Duration`"
/// error at the path as written, instead of an argument error on lq-core's
/// `Backoff::Custom` that points into lq-core's source.
fn custom_backoff(spec: &JobSpec) -> Option<TokenStream> {
    let BackoffSpec::Custom(path) = &spec.backoff else {
        return None;
    };
    let path = without_self(path, &spec.ident);
    Some(quote! {
        const __LQ_BACKOFF_FN: fn(u32) -> ::core::time::Duration = #path;
    })
}

/// `path` with a leading `Self` (`Self::retry_delay`, an associated function) read as
/// the type `ty`: the options are emitted outside the impl, where `Self` means nothing.
/// The type's name keeps the span of `Self`, so errors still point at what was written.
fn without_self(path: &syn::Path, ty: &syn::Ident) -> syn::Path {
    let mut path = path.clone();
    if let (None, Some(first)) = (path.leading_colon, path.segments.first_mut()) {
        if first.ident == "Self" {
            let mut ident = ty.clone();
            ident.set_span(first.ident.span());
            first.ident = ident;
        }
    }
    path
}

/// `fn unique_key`, when a template was given: the text, and each field escaped by
/// `push_key_value` so that distinct values render distinct keys.
fn unique_key(spec: &JobSpec) -> Option<TokenStream> {
    let template = spec.unique_key.as_ref()?;
    let span = template.lit.span();
    let escape = &template.escape;
    let body = match template.parts.as_slice() {
        [] => quote!(::std::string::String::new()),
        [Part::Text(text)] => quote!(::std::string::String::from(#text)),
        parts => {
            let capacity = template.lit.value().len();
            let pushes = parts.iter().map(|part| match part {
                Part::Text(text) => quote!(__lq_key.push_str(#text);),
                Part::Field(m) => quote_spanned!(span=>
                    __lq::__private::push_key_value(
                        &mut __lq_key,
                        &::core::format_args!("{}", self.#m),
                        #escape,
                    );
                ),
            });
            quote!({
                let mut __lq_key = ::std::string::String::with_capacity(#capacity);
                #(#pushes)*
                __lq_key
            })
        }
    };
    Some(quote! {
        fn unique_key(&self) -> ::core::option::Option<::std::string::String> {
            ::core::option::Option::Some(#body)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ast::Input, attr::Entries, valid};
    use syn::{parse_quote, DeriveInput};

    fn expand_str(input: DeriveInput) -> String {
        let ast = Input::from_derive(&input).unwrap();
        let spec = valid::validate(&ast, Entries::from_attrs(&input.attrs).unwrap()).unwrap();
        expand(&spec, &quote!(::lq_runtime)).to_string()
    }

    #[test]
    fn emits_options_and_registration() {
        let out = expand_str(parse_quote! {
            #[job(queue = "emails", priority = 10, max_attempts = 5,
                  backoff = exponential(base = "2s", max = "1h", jitter = 0.1))]
            struct SendWelcomeEmail { user_id: i64 }
        });
        assert!(out.contains("use :: lq_runtime as __lq ;"), "{out}");
        assert!(
            out.contains("const KIND : & 'static str = \"SendWelcomeEmail\" ;"),
            "{out}"
        );
        assert!(
            out.contains("queue : \"emails\" , priority : 10i16 , max_attempts : 5u32"),
            "{out}"
        );
        assert!(out.contains(
            "__lq :: Backoff :: Exponential { base : :: core :: time :: Duration :: from_millis (2000u64) , \
             max : :: core :: time :: Duration :: from_millis (3600000u64) , jitter : 0.1 }"
        ), "{out}");
        assert!(
            out.contains(
                "lease : __lq :: DEFAULT_LEASE , cron : :: core :: option :: Option :: None"
            ),
            "{out}"
        );
        assert!(
            !out.contains("assert_cron_default") && !out.contains("fn unique_key"),
            "{out}"
        );
        assert!(out.contains("kind : \"SendWelcomeEmail\" ,"), "{out}");
        assert!(out.contains("options : & __LQ_OPTIONS"), "{out}");
        assert!(out.contains("inventory :: submit !"), "{out}");
        assert!(out.contains("\"::SendWelcomeEmail\""), "{out}");
    }

    #[test]
    fn emits_unique_key_and_cron() {
        let out = expand_str(parse_quote! {
            #[job(unique_key = "{{x}}:{0}", cron = "@hourly", backoff = my::slow)]
            struct T(u32);
        });
        assert!(out.contains("__lq_key . push_str (\"{x}:\") ;"), "{out}");
        assert!(
            out.contains(
                "__lq :: __private :: push_key_value (& mut __lq_key , & :: core :: \
                 format_args ! (\"{}\" , self . 0) , \"\" ,) ;"
            ),
            "{out}"
        );
        assert!(
            out.contains("expr : \"@hourly\" , tz : \"UTC\" , catch_up : __lq :: CatchUp :: Once"),
            "{out}"
        );
        assert!(out.contains("build : __lq_cron_payload"), "{out}");
        assert!(out.contains("default_payload :: < T > ()"), "{out}");
        assert!(out.contains("assert_cron_default :: < T >"), "{out}");
        assert!(
            out.contains(
                "const __LQ_BACKOFF_FN : fn (u32) -> :: core :: time :: Duration = my :: slow ;"
            ),
            "{out}"
        );
        assert!(
            out.contains("backoff : __lq :: Backoff :: Custom (__LQ_BACKOFF_FN)"),
            "{out}"
        );
    }

    #[test]
    fn self_in_a_custom_backoff_names_the_type() {
        let out = expand_str(parse_quote! {
            #[job(backoff = Self::retry_delay)]
            struct r#Retry { id: u8 }
        });
        assert!(out.contains("Duration = r#Retry :: retry_delay ;"), "{out}");
        let out = expand_str(parse_quote! {
            #[job(backoff = retry::Self_)]
            struct T;
        });
        assert!(out.contains("Duration = retry :: Self_ ;"), "{out}");
    }

    #[test]
    fn cron_helpers_cannot_shadow_the_type() {
        let out = expand_str(parse_quote! {
            #[job(cron = "@hourly")]
            struct ViaDefault;
        });
        assert!(out.contains("trait __LqViaDefault"), "{out}");
        assert!(out.contains("trait __LqNoDefault"), "{out}");
        assert!(!out.contains("trait ViaDefault") && !out.contains("trait NoDefault"));
    }

    #[test]
    fn unique_key_escapes_separators_between_fields() {
        let out = expand_str(parse_quote! {
            #[job(unique_key = "k:{a}:{b}")]
            struct T { a: String, b: String }
        });
        assert!(
            out.contains("format_args ! (\"{}\" , self . a) , \"\\\\:\" ,) ;"),
            "{out}"
        );
        assert!(out.contains("__lq_key . push_str (\":\") ;"), "{out}");
    }

    #[test]
    fn constant_unique_key_needs_no_format() {
        let out = expand_str(parse_quote!(
            #[job(unique_key = "only-one{{}}")]
            struct A;
        ));
        assert!(
            out.contains(":: std :: string :: String :: from (\"only-one{}\")"),
            "{out}"
        );
    }
}
