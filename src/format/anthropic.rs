//! The Anthropic Messages API: `{role, content}` where `content` is a string
//! or an array of blocks; a call is a `tool_use` block of an assistant
//! message, a result a `tool_result` block of a user message (its text in
//! `content`). Server-side blocks (`server_tool_use`, `mcp_tool_use`,
//! `*_tool_result`) carry their own result inside the assistant turn and
//! are plain content here.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::OPEN_TAG;
use super::{
    Dialect, Fault, Format, Item, ItemKind, Original, ResultContent, Side, Skim, SkimResult, View,
};
use super::{field, member};
use crate::error::{Error, Result};

pub struct Anthropic;

/// The pattern Anthropic holds `tool_use` ids to, as its errors quote it.
pub const ID_PATTERN: &str = "^[a-zA-Z0-9_-]+$";

fn blocks(message: &Value) -> &[Value] {
    match member(message, "content") {
        Some(Value::Array(blocks)) => blocks,
        _ => &[],
    }
}

fn block_type(block: &Value) -> Option<&str> {
    member(block, "type").and_then(Value::as_str)
}

fn str_field<'a>(block: &'a Value, field: &str) -> &'a str {
    member(block, field)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn side_of(role: &str) -> Option<Side> {
    match role {
        "user" => Some(Side::User),
        "assistant" => Some(Side::Assistant),
        _ => None,
    }
}

impl Dialect for Anthropic {
    fn format(&self) -> Format {
        Format::Anthropic
    }

    fn validate(&self, message: &Value, path: &str, strict_roles: bool) -> Result<()> {
        let Some(obj) = message.as_object() else {
            return Err(Error::invalid_params(path, "a message must be an object"));
        };
        let role = field(obj, "role").and_then(Value::as_str);
        // Claude Code 2.1 sends `system` messages among the others (its
        // agent list, reminders); they hold text and belong to no turn.
        if !matches!(role, Some("user" | "assistant" | "system")) {
            return Err(Error::invalid_params(
                format!("{path}.role"),
                "role must be \"user\", \"assistant\" or \"system\"",
            ));
        }
        let blocks = match field(obj, "content") {
            Some(Value::String(_)) => return Ok(()),
            Some(Value::Array(blocks)) => blocks,
            _ => {
                return Err(Error::invalid_params(
                    format!("{path}.content"),
                    "content must be a string or an array of blocks",
                ));
            }
        };
        for (i, block) in blocks.iter().enumerate() {
            // Named only when refused: a valid block costs no string.
            let at = || format!("{path}.content[{i}]");
            let Some(kind) = block_type(block) else {
                return Err(Error::invalid_params(
                    format!("{}.type", at()),
                    "a content block must be an object with a string `type`",
                ));
            };
            let (id_field, belongs) = match kind {
                "tool_use" => ("id", "assistant"),
                "tool_result" => ("tool_use_id", "user"),
                _ => continue,
            };
            match member(block, id_field).and_then(Value::as_str) {
                Some(id) if !id.is_empty() => {}
                _ => {
                    return Err(Error::invalid_params(
                        format!("{}.{id_field}", at()),
                        format!("a {kind} block needs a non-empty string `{id_field}`"),
                    ));
                }
            }
            if strict_roles && role != Some(belongs) {
                return Err(Error::invalid_params(
                    format!("{}.type", at()),
                    format!(
                        "a {kind} block belongs in a {belongs} message, not a {} message",
                        role.unwrap_or_default()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn side(&self, message: &Value) -> Option<Side> {
        member(message, "role")
            .and_then(Value::as_str)
            .and_then(side_of)
    }

    fn items<'a>(&self, message: &'a Value) -> Vec<Item<'a>> {
        let side = self.side(message);
        match member(message, "content") {
            Some(Value::Array(blocks)) => blocks
                .iter()
                .enumerate()
                .map(|(index, block)| match block_type(block) {
                    Some("tool_use") => Item {
                        kind: ItemKind::Call,
                        index,
                        id: Cow::Borrowed(str_field(block, "id")),
                        name: Cow::Borrowed(str_field(block, "name")),
                        misplaced: side != Some(Side::Assistant),
                        positional: false,
                    },
                    Some("tool_result") => Item {
                        kind: ItemKind::Result,
                        index,
                        id: Cow::Borrowed(str_field(block, "tool_use_id")),
                        name: Cow::Borrowed(""),
                        misplaced: side != Some(Side::User),
                        positional: false,
                    },
                    _ => other(index),
                })
                .collect(),
            // A string is one item of content (even an empty one: the
            // provider sees the message).
            Some(Value::String(_)) => vec![other(0)],
            _ => Vec::new(),
        }
    }

    fn result_content<'a>(&self, message: &'a Value, index: usize) -> ResultContent<'a> {
        ResultContent::of_value(
            blocks(message)
                .get(index)
                .and_then(|b| member(b, "content")),
        )
    }

    fn result_value<'a>(&self, message: &'a Value, index: usize) -> Option<&'a Value> {
        blocks(message)
            .get(index)
            .and_then(|b| member(b, "content"))
    }

    fn put_replacement(&self, message: &mut Value, index: usize, text: &str) {
        if let Some(block) = message
            .get_mut("content")
            .and_then(Value::as_array_mut)
            .and_then(|b| b.get_mut(index))
        {
            super::put_text_keeping_marker(block, "content", text);
        }
    }

    fn error_results(&self, calls: &[(String, String)], _turn: &[Value], text: &str) -> Vec<Value> {
        let content: Vec<Value> = calls
            .iter()
            .map(|(id, _)| {
                json!({
                    "type": "tool_result",
                    "tool_use_id": id,
                    "is_error": true,
                    "content": text,
                })
            })
            .collect();
        vec![json!({ "role": "user", "content": content })]
    }

    fn without_items(&self, message: &Value, drop: &[usize]) -> Option<Value> {
        let mut out = message.clone();
        match out.get_mut("content") {
            Some(Value::Array(blocks)) => {
                let mut i = 0;
                blocks.retain(|_| {
                    let keep = drop.binary_search(&i).is_err();
                    i += 1;
                    keep
                });
                (!blocks.is_empty()).then_some(out)
            }
            Some(Value::String(_)) if drop.contains(&0) => None,
            _ => Some(out),
        }
    }

    fn only_items(&self, message: &Value, take: &[usize]) -> Vec<Value> {
        let picked: Vec<Value> = blocks(message)
            .iter()
            .enumerate()
            .filter(|(i, _)| take.binary_search(i).is_ok())
            .map(|(_, b)| b.clone())
            .collect();
        if picked.is_empty() {
            return Vec::new();
        }
        let role = message.get("role").cloned().unwrap_or(Value::Null);
        vec![json!({ "role": role, "content": picked })]
    }

    fn skim<'a>(&self, message: &'a [u8]) -> Option<Skim<'a>> {
        crate::json::from_slice(message).ok().map(skim_head)
    }

    fn provider_error(&self, fault: Fault, message: usize, index: usize, ids: &[String]) -> String {
        let ids = ids.join(", ");
        match fault {
            Fault::Unanswered | Fault::Late => format!(
                "messages.{message}: `tool_use` ids were found without `tool_result` blocks immediately after: {ids}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
            ),
            Fault::Orphan | Fault::Duplicate => format!(
                "messages.{message}.content.{index}: unexpected `tool_use_id` found in `tool_result` blocks: {ids}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
            ),
            Fault::WrongRole => format!(
                "messages.{message}.content.{index}: a tool block in the wrong role ({ids}): `tool_use` belongs in an assistant message, `tool_result` in a user message."
            ),
            Fault::InvalidCallId => format!(
                "messages.{message}.content.{index}.tool_use.id: String should match pattern '{ID_PATTERN}'"
            ),
            Fault::InvalidResultId => format!(
                "messages.{message}.content.{index}.tool_result.tool_use_id: String should match pattern '{ID_PATTERN}'"
            ),
            Fault::ReusedCallId => {
                format!("messages.{message}.content.{index}: `tool_use` ids must be unique")
            }
        }
    }

    fn checks_ids(&self) -> bool {
        true
    }

    fn compaction_index(&self, message: &Value) -> Option<usize> {
        blocks(message)
            .iter()
            .rposition(|b| block_type(b) == Some("compaction"))
    }

    fn item_value<'a>(&self, message: &'a Value, index: usize) -> Option<&'a Value> {
        blocks(message).get(index)
    }

    fn set_item_id(&self, message: &mut Value, index: usize, id: &str) {
        let Some(block) = message
            .get_mut("content")
            .and_then(Value::as_array_mut)
            .and_then(|b| b.get_mut(index))
        else {
            return;
        };
        let field = match block_type(block) {
            Some("tool_use") => "id",
            Some("tool_result") => "tool_use_id",
            _ => return,
        };
        if let Some(obj) = block.as_object_mut() {
            obj.insert(field.into(), Value::String(id.to_owned()));
        }
    }
}

/// The skim of a parsed [`MessageHead`]: transcripts are read with the
/// message head parsed in the same pass as the line around it.
pub fn skim_head(head: MessageHead<'_>) -> Skim<'_> {
    let side = side_of(&head.role);
    let mut skim = Skim {
        side,
        ..Skim::default()
    };
    for block in head.content.0 {
        match block.kind.as_deref() {
            Some("tool_use") if side == Some(Side::Assistant) => skim
                .calls
                .push((block.id.unwrap_or_default(), block.name.unwrap_or_default())),
            // The provider drops what stands before a compaction block
            // (PROTOCOL.md 11.2): no call there waits for a result.
            Some("compaction") => skim.calls.clear(),
            Some("tool_result") if side == Some(Side::User) => {
                let raw = block
                    .content
                    .map_or(&b"null"[..], |raw| raw.get().as_bytes());
                skim.results.push(SkimResult {
                    id: block.tool_use_id.unwrap_or_default(),
                    original: (!is_replacement_json(raw)).then_some(Original::Raw(raw)),
                    digest: None,
                });
            }
            _ => {}
        }
    }
    skim
}

pub(crate) fn other(index: usize) -> Item<'static> {
    Item {
        kind: ItemKind::Other,
        index,
        id: Cow::Borrowed(""),
        name: Cow::Borrowed(""),
        misplaced: false,
        positional: false,
    }
}

/// Whether a result's raw content is a preview toolwire put in: then it is
/// a replacement, not an original.
pub(crate) fn is_replacement_json(raw: &[u8]) -> bool {
    raw.strip_prefix(b"\"")
        .is_some_and(|s| s.starts_with(OPEN_TAG.as_bytes()))
        || raw
            .strip_prefix(b"[{\"type\":\"text\",\"text\":\"")
            .is_some_and(|s| s.starts_with(OPEN_TAG.as_bytes()))
}

/// A message reduced to its role and the ids, names and raw content of its
/// tool blocks; everything else is skipped by the parser without copying.
#[derive(Deserialize)]
pub struct MessageHead<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow, default)]
    content: ContentHead<'a>,
}

#[derive(Default)]
pub struct ContentHead<'a>(Vec<BlockHead<'a>>);

#[derive(Deserialize)]
pub struct BlockHead<'a> {
    #[serde(rename = "type", borrow, default, deserialize_with = "text")]
    pub(crate) kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    pub(crate) id: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    pub(crate) tool_use_id: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    pub(crate) name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) content: Option<&'a RawValue>,
}

/// An optional string, borrowed from the line unless it has escapes
/// (serde's own `Option<Cow<str>>` always copies); `null` is none, and
/// anything but a string is refused, as it would be.
pub(crate) fn text<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Cow<'de, str>>, D::Error> {
    struct Text;
    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_none<E>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(
            self,
            d: D,
        ) -> std::result::Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
        fn visit_borrowed_str<E>(self, s: &'de str) -> std::result::Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(s)))
        }
        fn visit_str<E>(self, s: &str) -> std::result::Result<Self::Value, E> {
            Ok(Some(Cow::Owned(s.to_owned())))
        }
        fn visit_string<E>(self, s: String) -> std::result::Result<Self::Value, E> {
            Ok(Some(Cow::Owned(s)))
        }
    }
    d.deserialize_option(Text)
}

impl<'de: 'a, 'a> Deserialize<'de> for ContentHead<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = ContentHead<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array of blocks")
            }
            fn visit_str<E>(self, _: &str) -> std::result::Result<Self::Value, E> {
                Ok(ContentHead::default())
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut blocks = Vec::new();
                while let Some(block) = seq.next_element::<BlockHead<'a>>()? {
                    blocks.push(block);
                }
                Ok(ContentHead(blocks))
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// The [`View`] of a message read straight from its text, for a message
/// `pair/append` takes (roles checked strictly); `None` unless the message
/// is one [`Anthropic::validate`] accepts, read with borrowed strings and
/// every other value skipped unparsed. `None` does not mean invalid: a
/// shape this reader leaves alone (a key with an escape, a non-string
/// where a string is read, nesting past serde_json's limit) is read as a
/// value, which also words any error.
pub fn text_view(text: &str) -> Option<View<'_>> {
    let Object(head) = serde_json::from_str::<Object<TextMessage>>(text).ok()?;
    let role = head.role.flatten()?;
    let side = side_of(&role);
    let role_known = side.is_some() || role == "system";
    if !role_known {
        return None;
    }
    let blocks = match head.content? {
        TextContent::String => {
            return Some(View {
                side,
                items: vec![other(0)],
                compaction: None,
            });
        }
        TextContent::Blocks(blocks) => blocks,
    };
    let mut items = Vec::with_capacity(blocks.len());
    let mut compaction = None;
    for (index, block) in blocks.into_iter().enumerate() {
        let item = match &*block.kind.flatten()? {
            "tool_use" if side == Some(Side::Assistant) => Item {
                kind: ItemKind::Call,
                index,
                id: block.id.flatten().filter(|id| !id.is_empty())?,
                name: block.name.flatten().unwrap_or_default(),
                misplaced: false,
                positional: false,
            },
            "tool_result" if side == Some(Side::User) => Item {
                kind: ItemKind::Result,
                index,
                id: block.tool_use_id.flatten().filter(|id| !id.is_empty())?,
                name: Cow::Borrowed(""),
                misplaced: false,
                positional: false,
            },
            // In the wrong role: refused, in the words of `validate`.
            "tool_use" | "tool_result" => return None,
            "compaction" => {
                compaction = Some(index);
                other(index)
            }
            _ => other(index),
        };
        items.push(item);
    }
    Some(View {
        side,
        items,
        compaction,
    })
}

/// A member as [`text_view`] reads it: absent, null or a string.
type Member<'a> = Option<Option<Cow<'a, str>>>;

/// A message as [`text_view`] reads it: its role and content.
#[derive(Default)]
struct TextMessage<'a> {
    role: Member<'a>,
    content: Option<TextContent<'a>>,
}

enum TextContent<'a> {
    String,
    Blocks(Vec<TextBlock<'a>>),
}

/// A block as [`text_view`] reads it: the strings the pairing rules look
/// at.
#[derive(Default)]
struct TextBlock<'a> {
    kind: Member<'a>,
    id: Member<'a>,
    tool_use_id: Member<'a>,
    name: Member<'a>,
}

/// A string or null, borrowed unless it has escapes ([`text`]).
struct Text<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        text(d).map(Text)
    }
}

/// Set a member read once; a second one (which serde_json's map would
/// keep the last of) leaves the message to the value's reading.
fn once<T, E: serde::de::Error>(slot: &mut Option<T>, value: T) -> std::result::Result<(), E> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err(E::custom("a member given twice")),
    }
}

/// What [`Object`] reads an object into, member by member.
trait Members<'de>: Default {
    /// Read the value of `key` from `map`; `false` for a key this reader
    /// does not look at, whose value is then skipped unparsed.
    fn member<A: serde::de::MapAccess<'de>>(
        &mut self,
        key: &'de str,
        map: &mut A,
    ) -> std::result::Result<bool, A::Error>;
}

/// An object read into `T` with its keys borrowed. Anything but an object
/// (serde's derive would take an array too), an escaped key or a member
/// given twice is refused, which leaves the message to the value's reading.
struct Object<T>(T);

impl<'de, T: Members<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Members<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<T, A::Error> {
                let mut object = T::default();
                while let Some(key) = map.next_key::<&'de str>()? {
                    if !object.member(key, &mut map)? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(object)
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
            .map(Object)
    }
}

impl<'de> Members<'de> for TextMessage<'de> {
    fn member<A: serde::de::MapAccess<'de>>(
        &mut self,
        key: &'de str,
        map: &mut A,
    ) -> std::result::Result<bool, A::Error> {
        match key {
            "role" => once(&mut self.role, map.next_value::<Text<'de>>()?.0)?,
            "content" => once(&mut self.content, map.next_value::<TextContent<'de>>()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'de> Members<'de> for TextBlock<'de> {
    fn member<A: serde::de::MapAccess<'de>>(
        &mut self,
        key: &'de str,
        map: &mut A,
    ) -> std::result::Result<bool, A::Error> {
        let slot = match key {
            "type" => &mut self.kind,
            "id" => &mut self.id,
            "tool_use_id" => &mut self.tool_use_id,
            "name" => &mut self.name,
            _ => return Ok(false),
        };
        once(slot, map.next_value::<Text<'de>>()?.0)?;
        Ok(true)
    }
}

impl<'de> Deserialize<'de> for TextContent<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = TextContent<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array of blocks")
            }
            fn visit_str<E>(self, _: &str) -> std::result::Result<Self::Value, E> {
                Ok(TextContent::String)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(Object(block)) = seq.next_element::<Object<TextBlock<'de>>>()? {
                    blocks.push(block);
                }
                Ok(TextContent::Blocks(blocks))
            }
        }
        d.deserialize_any(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Values that stand where the reader expects a string, and others.
    fn member() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!("a")),
            Just(json!("")),
            Just(json!("toolu_01")),
            Just(json!("a\"b\u{e9}")),
            Just(Value::Null),
            Just(json!(5)),
            Just(json!(["a"])),
        ]
    }

    fn block() -> impl Strategy<Value = Value> {
        let kind = prop_oneof![
            Just(json!("text")),
            Just(json!("tool_use")),
            Just(json!("tool_result")),
            Just(json!("compaction")),
            Just(json!("server_tool_use")),
            member(),
        ];
        let field = |name: &'static str| {
            prop::option::of(member()).prop_map(move |v| v.map(|v| (name.to_owned(), v)))
        };
        let object = (
            prop::option::of(kind),
            field("id"),
            field("tool_use_id"),
            field("name"),
            field("content"),
            any::<bool>(),
        )
            .prop_map(|(kind, id, tool_use_id, name, content, input_first)| {
                let mut block = serde_json::Map::new();
                if input_first {
                    block.insert("input".into(), json!({"command": "make", "n": [1, 2.5]}));
                }
                if let Some(kind) = kind {
                    block.insert("type".into(), kind);
                }
                for (k, v) in [id, tool_use_id, name, content].into_iter().flatten() {
                    block.insert(k, v);
                }
                Value::Object(block)
            });
        prop_oneof![8 => object, 1 => member()]
    }

    fn message() -> impl Strategy<Value = Value> {
        let role = prop_oneof![
            Just(json!("user")),
            Just(json!("assistant")),
            Just(json!("system")),
            Just(json!("tool")),
            member(),
        ];
        let content = prop_oneof![
            2 => prop::collection::vec(block(), 0..4).prop_map(Value::Array),
            1 => member(),
        ];
        (
            prop::option::of(role),
            prop::option::of(content),
            any::<bool>(),
        )
            .prop_map(|(role, content, extra)| {
                let mut message = serde_json::Map::new();
                if extra {
                    message.insert("id".into(), json!("msg_1"));
                }
                if let Some(role) = role {
                    message.insert("role".into(), role);
                }
                if let Some(content) = content {
                    message.insert("content".into(), content);
                }
                Value::Object(message)
            })
    }

    proptest! {
        /// What `pair/append` reads of a message's text is what it would
        /// read of its value: a message the text reader takes is one the
        /// checks accept, with the same side, items and compaction; a
        /// message it leaves is read as a value, as before.
        #[test]
        fn the_text_reader_reads_what_the_value_gives(message in message()) {
            let text = serde_json::to_string(&message).unwrap();
            let valid = Anthropic.validate(&message, "message", true).is_ok();
            match text_view(&text) {
                Some(view) => {
                    prop_assert!(valid, "taken but refused as a value: {}", text);
                    prop_assert_eq!(view, View::of(&Anthropic, &message));
                }
                // Left to the value: only where a string member is not a
                // string (the value's checks pass over some of those).
                None => prop_assert!(
                    !valid || text.contains(":5") || text.contains(":[\"a\"]") || text.contains(":null"),
                    "a valid message left to the value: {}", text
                ),
            }
        }
    }

    #[test]
    fn a_pair_is_read_from_its_text() {
        let call = r#"{"role":"assistant","content":[{"type":"text","text":"Let me build."},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"make"}}]}"#;
        let result = r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"exit status 0"},{"type":"text","text":"go on"}]}"#;
        for text in [call, result] {
            let value: Value = serde_json::from_str(text).unwrap();
            let view = text_view(text).expect("taken");
            assert_eq!(view, View::of(&Anthropic, &value));
            assert!(view.items.iter().all(|i| !matches!(i.id, Cow::Owned(_))));
        }
        assert_eq!(
            text_view(call).unwrap().calls().collect::<Vec<_>>(),
            [("toolu_1", "Bash")]
        );
        // Arrays, a second member and escaped keys are left to the value.
        for text in [
            r#"["user","hi"]"#,
            r#"{"role":"user","role":"user","content":"hi"}"#,
            r#"{"role":"user","content":[["text","hi"]]}"#,
            r#"{"r\u006fle":"user","content":"hi"}"#,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","tool_use_id":"b"}]}"#,
        ] {
            assert!(text_view(text).is_none(), "{text}");
        }
    }

    #[test]
    fn block_ids_are_strings_or_null() {
        fn skim(line: &str) -> Option<Vec<(Cow<'_, str>, Cow<'_, str>)>> {
            Anthropic.skim(line.as_bytes()).map(|s| s.calls)
        }
        let calls = skim(r#"{"role":"assistant","content":[{"type":"tool_use","id":"a\"b","name":"Bash"},{"type":"tool_use","id":null}]}"#).unwrap();
        assert_eq!(calls[0].0, "a\"b");
        assert!(
            matches!(calls[0].1, Cow::Borrowed("Bash")),
            "borrowed from the line"
        );
        assert_eq!(calls[1], (Cow::Borrowed(""), Cow::Borrowed("")));
        // Anything but a string or null leaves the message unread.
        assert!(skim(r#"{"role":"assistant","content":[{"type":"tool_use","id":5}]}"#).is_none());
        assert!(
            skim(r#"{"role":"assistant","content":[{"type":["tool_use"],"id":"a"}]}"#).is_none()
        );
    }

    #[test]
    fn system_messages_are_read_and_belong_to_no_turn() {
        // Claude Code 2.1.197's second message.
        let system = json!({"role": "system", "content": "Available agent types: …"});
        Anthropic.validate(&system, "messages[1]", true).unwrap();
        assert_eq!(Anthropic.side(&system), None);
        // Tool blocks stay where the contract puts them.
        let misplaced = json!({"role": "system", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "x"}]});
        assert!(Anthropic.validate(&misplaced, "messages[1]", true).is_err());
        let err = Anthropic
            .validate(
                &json!({"role": "tool", "content": "x"}),
                "messages[2]",
                false,
            )
            .unwrap_err();
        assert!(err.to_string().contains("messages[2].role"), "{err}");
    }

    #[test]
    fn skim_digest_matches_the_digest_of_the_parsed_content() {
        use crate::format::{Digest, DigestKind};
        let msg = json!({"role":"user","content":[
            {"type":"tool_result","tool_use_id":"a","content":"line\n\"q\" é \u{1F600}"},
            {"type":"tool_result","tool_use_id":"b","content":[{"type":"text","text":"x"}]},
            {"type":"tool_result","tool_use_id":"c","content":"<persisted-output>\nkept"},
        ]});
        let compact = serde_json::to_vec(&msg).unwrap();
        // The same message as another writer might spell it: spaces, and
        // escapes serde_json does not use.
        let imported = br#"{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "line\n\"q\" \u00e9 \ud83d\ude00"},
            {"type": "tool_result", "tool_use_id": "b", "content": [ {"type": "text", "text": "\u0078"} ]},
            {"type": "tool_result", "tool_use_id": "c", "content": "<persisted-output>\nkept"}]}"#;
        let blocks = msg["content"].as_array().unwrap();
        for line in [&compact[..], &imported[..]] {
            let skim = Anthropic.skim(line).unwrap();
            for kind in [DigestKind::Sha256, DigestKind::Xxh3] {
                let digests: Vec<Option<Digest>> = skim
                    .results
                    .iter()
                    .map(|r| r.original.as_ref().map(|o| o.digest(kind)))
                    .collect();
                assert_eq!(
                    digests[0],
                    Some(Digest::of_value_as(kind, &blocks[0]["content"]))
                );
                assert_eq!(
                    digests[1],
                    Some(Digest::of_value_as(kind, &blocks[1]["content"]))
                );
                assert_eq!(digests[2], None);
            }
        }
    }
}
