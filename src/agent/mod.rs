//! The `agent` family: the tools agents of one vendor or another expect to find in a sandbox, native,
//! with their names and schemas (issue 48). For now OpenAI's `apply_patch` (group `openai`) and
//! Anthropic's text editor `str_replace_based_edit_tool` (group `anthropic`); off by default until the
//! family is complete.

mod apply_patch;
mod family;
mod openai_shell;
mod text_editor;
mod toolset;
pub use family::{family, limits};

/// The group of OpenAI's tools.
pub const OPENAI_GROUP: &str = "openai";

/// The group of Anthropic's tools.
pub const ANTHROPIC_GROUP: &str = "anthropic";
