//! The `unique_key` template: literal text with `{field}` placeholders.
//!
//! `{name}` names a field, `{0}` a tuple field, `{{` and `}}` are literal braces.
//!
//! Distinct field values must never render one key, so two placeholders need text
//! between them, and when there are several, each value is escaped at run time (see
//! `lq_core::__private::push_key_value`): a backslash goes before `\` and before the
//! first character of each text between two placeholders. Reading a key left to
//! right, `\x` is an escaped `x` and an unescaped separator ends a value, so the key
//! decodes back into its values; a separator starting with `\` would break that.

use syn::ext::IdentExt as _;
use syn::{Index, LitStr, Member};

use crate::ast::Fields;
use crate::diag::{backticked, did_you_mean};

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Literal text, braces unescaped.
    Text(String),
    /// A placeholder's field name or index, as written.
    Field(String),
}

/// Splits `text` into pieces; the error says what to write instead.
pub(crate) fn parse(text: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '}' => {
                return Err("unmatched `}` in `unique_key`: write `}}` for a literal brace".into())
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => {
                            return Err("unclosed `{` in `unique_key`: close the placeholder \
                                        (`{field}`), or write `{{` for a literal brace"
                                .into())
                        }
                    }
                }
                check_placeholder(&name)?;
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Field(name));
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

fn check_placeholder(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err(
            "empty `{}` in `unique_key`: name a field, like `{order_id}` (or `{0}` in a \
                    tuple struct)"
                .into(),
        );
    }
    if let Some((field, _)) = name.split_once(':') {
        return Err(format!(
            "format specs are not supported in `unique_key`: write `{{{}}}`; the field is \
             formatted with `Display`",
            field.trim()
        ));
    }
    if name != name.trim() || name.contains(char::is_whitespace) {
        return Err(format!(
            "remove the spaces in `{{{name}}}`: write `{{{}}}`",
            name.trim()
        ));
    }
    Ok(())
}

/// The characters escaped in each field value: empty when at most one placeholder,
/// else `\` and the first character of each text between two placeholders. The
/// error says how to separate placeholders that nothing, or a backslash, separates.
pub(crate) fn escape_set(pieces: &[Piece]) -> Result<String, String> {
    let mut escape = String::new();
    let mut last_field: Option<&str> = None;
    let mut text: Option<&str> = None;
    for piece in pieces {
        match piece {
            Piece::Text(t) => text = Some(t),
            Piece::Field(b) => {
                if let Some(a) = last_field {
                    match text.and_then(|t| t.chars().next()) {
                        None => {
                            return Err(format!(
                                "put a separator between `{{{a}}}` and `{{{b}}}` in \
                                 `unique_key` (for example `{{{a}}}:{{{b}}}`): without one, \
                                 different values can render the same key"
                            ))
                        }
                        Some('\\') => {
                            return Err(format!(
                                "the text between `{{{a}}}` and `{{{b}}}` in `unique_key` \
                                 starts with `\\`, which marks escaped characters in field \
                                 values: start it with another character (for example \
                                 `{{{a}}}:{{{b}}}`)"
                            ))
                        }
                        Some(c) => {
                            if escape.is_empty() {
                                escape.push('\\');
                            }
                            if !escape.contains(c) {
                                escape.push(c);
                            }
                        }
                    }
                }
                last_field = Some(b);
                text = None;
            }
        }
    }
    Ok(escape)
}

/// One piece of a resolved template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    /// Literal text, braces unescaped.
    Text(String),
    /// A field, spanned at the attribute's literal.
    Field(Member),
}

/// A template checked against the struct's fields, ready to expand.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    /// Text and fields, in order.
    pub(crate) parts: Vec<Part>,
    /// The characters escaped in each field value (see [`escape_set`]).
    pub(crate) escape: String,
    /// The literal the template was written as.
    pub(crate) lit: LitStr,
}

/// Parses `lit` and resolves each placeholder against the fields of type `ty`.
pub(crate) fn resolve(lit: &LitStr, ty: &str, fields: &Fields) -> syn::Result<Template> {
    let err = |message: String| syn::Error::new(lit.span(), message);
    let pieces = parse(&lit.value()).map_err(err)?;
    if let Some(why) = refused_at_enqueue(&pieces) {
        return Err(err(why));
    }
    let mut parts = Vec::new();
    for piece in &pieces {
        parts.push(match piece {
            Piece::Text(text) => Part::Text(text.clone()),
            Piece::Field(name) => Part::Field(member(name, ty, fields, lit).map_err(err)?),
        });
    }
    Ok(Template {
        parts,
        escape: escape_set(&pieces).map_err(err)?,
        lit: lit.clone(),
    })
}

/// Longest unique key the database index holds, as `lq_core::MAX_UNIQUE_KEY_BYTES`.
const MAX_UNIQUE_KEY_BYTES: usize = 2048;

/// Why every key this template makes would be refused at enqueue, if it would:
/// keys are never empty, at most [`MAX_UNIQUE_KEY_BYTES`] long, and hold no NUL.
fn refused_at_enqueue(pieces: &[Piece]) -> Option<String> {
    let text: String = pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Text(t) => Some(t.as_str()),
            Piece::Field(_) => None,
        })
        .collect();
    let has_field = pieces.iter().any(|p| matches!(p, Piece::Field(_)));
    if pieces.is_empty() {
        Some(
            "`unique_key` is empty, and an empty key is refused at enqueue: write a constant \
             (\"nightly-report\") for one live job at a time, or name fields (\"order:{order_id}\")"
                .to_owned(),
        )
    } else if text.contains('\0') {
        Some("`unique_key` holds a NUL character, which PostgreSQL text cannot store".to_owned())
    } else if text.len() > MAX_UNIQUE_KEY_BYTES {
        Some(format!(
            "`unique_key`'s text is {} bytes, over the {MAX_UNIQUE_KEY_BYTES} the unique index \
             holds{}",
            text.len(),
            if has_field { ", before its fields" } else { "" }
        ))
    } else {
        None
    }
}

fn member(name: &str, ty: &str, fields: &Fields, lit: &LitStr) -> Result<Member, String> {
    let names = fields.names();
    match fields {
        Fields::Named(idents) => {
            if let Some(ident) = idents.iter().find(|i| i.unraw() == name) {
                let mut ident = ident.clone();
                ident.set_span(lit.span());
                return Ok(Member::Named(ident));
            }
        }
        Fields::Unnamed(_) => {
            if let Some(index) = names.iter().position(|n| n == name) {
                return Ok(Member::Unnamed(Index {
                    index: index as u32,
                    span: lit.span(),
                }));
            }
        }
        Fields::Unit => {}
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let known = match fields {
        Fields::Unit => format!(
            "`{ty}` has no fields; a key without placeholders (like \"{}\") allows one live job",
            ty.to_lowercase()
        ),
        Fields::Unnamed(_) => format!(
            "`{ty}` is a tuple struct: name its fields by position, {}",
            backticked(names.iter().copied())
        ),
        Fields::Named(_) => format!("`{ty}` has fields {}", backticked(names.iter().copied())),
    };
    Err(format!(
        "unknown field `{name}` in `unique_key`: {}{known}",
        did_you_mean(name, names.iter().copied())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    use Piece::{Field, Text};

    #[test]
    fn splits_text_and_fields() {
        assert_eq!(
            parse("order:{order_id}"),
            Ok(vec![Text("order:".into()), Field("order_id".into())])
        );
        assert_eq!(
            parse("{a}{b}"),
            Ok(vec![Field("a".into()), Field("b".into())])
        );
        assert_eq!(
            parse("{{x}}-{0}"),
            Ok(vec![Text("{x}-".into()), Field("0".into())])
        );
        assert_eq!(parse(""), Ok(vec![]));
    }

    #[test]
    fn refuses_templates_whose_every_key_enqueue_would_refuse() {
        let refused = |t: &str| refused_at_enqueue(&parse(t).unwrap());
        assert!(refused("").unwrap().contains("empty"));
        assert!(refused("a\0b").unwrap().contains("NUL"));
        assert!(refused(&"k".repeat(2049)).unwrap().contains("2049 bytes"));
        assert!(refused(&format!("{}{{id}}", "k".repeat(2049)))
            .unwrap()
            .contains("before its fields"));
        assert_eq!(refused(&"k".repeat(2048)), None);
        assert_eq!(refused("{id}"), None);
    }

    #[test]
    fn explains_malformed_templates() {
        assert!(parse("a{b").unwrap_err().starts_with("unclosed `{`"));
        assert!(parse("a}b").unwrap_err().starts_with("unmatched `}`"));
        assert!(parse("a{}").unwrap_err().starts_with("empty `{}`"));
        assert!(parse("{id:?}").unwrap_err().contains("write `{id}`"));
        assert!(parse("{ id }").unwrap_err().contains("write `{id}`"));
    }

    #[test]
    fn resolves_named_and_tuple_fields() {
        let named = Fields::Named(vec![parse_quote!(order_id), parse_quote!(r#type)]);
        let t = resolve(&parse_quote!("o:{order_id}/{type}/{{}}"), "O", &named).unwrap();
        assert_eq!(
            t.parts,
            [
                Part::Text("o:".into()),
                Part::Field(parse_quote!(order_id)),
                Part::Text("/".into()),
                Part::Field(parse_quote!(r#type)),
                Part::Text("/{}".into()),
            ]
        );
        assert_eq!(t.escape, "\\/");
        let t = resolve(&parse_quote!("{1}-{0}"), "T", &Fields::Unnamed(2)).unwrap();
        assert_eq!(
            t.parts,
            [
                Part::Field(parse_quote!(1)),
                Part::Text("-".into()),
                Part::Field(parse_quote!(0)),
            ]
        );
    }

    fn escape(template: &str) -> Result<String, String> {
        escape_set(&parse(template).unwrap())
    }

    #[test]
    fn escapes_only_what_separates_values() {
        assert_eq!(escape("welcome:{user_id}").as_deref(), Ok(""));
        assert_eq!(escape("{a}").as_deref(), Ok(""));
        assert_eq!(escape("k").as_deref(), Ok(""));
        assert_eq!(escape("k:{a}:{b}").as_deref(), Ok("\\:"));
        assert_eq!(escape("{a}-{b}/x{c}-{d}").as_deref(), Ok("\\-/"));
        assert_eq!(escape("{a}{{{b}").as_deref(), Ok("\\{"));
        assert_eq!(escape("{a}:\\{b}").as_deref(), Ok("\\:"));
    }

    #[test]
    fn placeholders_need_a_separator() {
        assert_eq!(
            escape("k:{a}{b}").unwrap_err(),
            "put a separator between `{a}` and `{b}` in `unique_key` (for example \
             `{a}:{b}`): without one, different values can render the same key"
        );
        assert!(escape("{0}:{1}{2}")
            .unwrap_err()
            .contains("`{1}` and `{2}`"));
        let e = escape("{a}\\{b}").unwrap_err();
        assert!(
            e.starts_with("the text between `{a}` and `{b}` in `unique_key` starts with `\\`"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_list_the_real_ones() {
        let named = Fields::Named(vec![parse_quote!(order_id), parse_quote!(customer)]);
        let e = resolve(&parse_quote!("o:{ordr_id}"), "PlaceOrder", &named).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown field `ordr_id` in `unique_key`: did you mean `order_id`? `PlaceOrder` has \
             fields `order_id`, `customer`"
        );
        let e = resolve(&parse_quote!("{2}"), "T", &Fields::Unnamed(2)).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("name its fields by position, `0`, `1`"),
            "{e}"
        );
        let e = resolve(&parse_quote!("{x}"), "Nightly", &Fields::Unit).unwrap_err();
        assert!(e.to_string().contains("`Nightly` has no fields"), "{e}");
    }
}
