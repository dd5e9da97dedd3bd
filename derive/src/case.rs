//! serde's `rename_all` rules for struct fields, as serde_derive applies them
//! (serde_derive/src/internals/case.rs, `RenameRule::apply_to_field`): the content hash must
//! find a `skip_hash` field under the name serde stores it with, so the two must agree to the
//! byte. serde applies them to the field's identifier without its `r#`.

/// A `rename_all` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // serde's names, so each rule reads as serde's
pub enum RenameRule {
    LowerCase,
    UpperCase,
    PascalCase,
    CamelCase,
    SnakeCase,
    ScreamingSnakeCase,
    KebabCase,
    ScreamingKebabCase,
}

impl RenameRule {
    /// The rule named by `rename_all = "..."`; `None` for a name serde does not know (serde
    /// reports it).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "lowercase" => RenameRule::LowerCase,
            "UPPERCASE" => RenameRule::UpperCase,
            "PascalCase" => RenameRule::PascalCase,
            "camelCase" => RenameRule::CamelCase,
            "snake_case" => RenameRule::SnakeCase,
            "SCREAMING_SNAKE_CASE" => RenameRule::ScreamingSnakeCase,
            "kebab-case" => RenameRule::KebabCase,
            "SCREAMING-KEBAB-CASE" => RenameRule::ScreamingKebabCase,
            _ => return None,
        })
    }

    /// The stored name of a field named `field` (Rust identifiers are snake_case by
    /// convention, so `lowercase` and `snake_case` leave it as it is, as in serde).
    pub fn apply_to_field(self, field: &str) -> String {
        match self {
            RenameRule::LowerCase | RenameRule::SnakeCase => field.to_owned(),
            RenameRule::UpperCase | RenameRule::ScreamingSnakeCase => field.to_ascii_uppercase(),
            RenameRule::PascalCase => {
                let mut pascal = String::new();
                let mut capitalize = true;
                for ch in field.chars() {
                    if ch == '_' {
                        capitalize = true;
                    } else if capitalize {
                        pascal.push(ch.to_ascii_uppercase());
                        capitalize = false;
                    } else {
                        pascal.push(ch);
                    }
                }
                pascal
            }
            RenameRule::CamelCase => {
                let pascal = RenameRule::PascalCase.apply_to_field(field);
                // serde slices off the first byte, so a field whose first letter is not ASCII
                // makes serde_derive itself fail; lowering the first char agrees everywhere else.
                let mut chars = pascal.chars();
                match chars.next() {
                    Some(first) => first.to_ascii_lowercase().to_string() + chars.as_str(),
                    None => pascal,
                }
            }
            RenameRule::KebabCase => field.replace('_', "-"),
            RenameRule::ScreamingKebabCase => field.to_ascii_uppercase().replace('_', "-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RenameRule::*;
    use super::*;

    /// serde_derive's own table (`rename_fields` in its case.rs), plus the shapes a struct
    /// field can take beyond it.
    #[test]
    fn as_serde_renames_fields() {
        for &(original, upper, pascal, camel, screaming, kebab, screaming_kebab) in &[
            (
                "outcome", "OUTCOME", "Outcome", "outcome", "OUTCOME", "outcome", "OUTCOME",
            ),
            (
                "very_tasty",
                "VERY_TASTY",
                "VeryTasty",
                "veryTasty",
                "VERY_TASTY",
                "very-tasty",
                "VERY-TASTY",
            ),
            ("a", "A", "A", "a", "A", "a", "A"),
            ("z42", "Z42", "Z42", "z42", "Z42", "z42", "Z42"),
            // Leading, doubled and trailing underscores; digits after one.
            (
                "_private__x_",
                "_PRIVATE__X_",
                "PrivateX",
                "privateX",
                "_PRIVATE__X_",
                "-private--x-",
                "-PRIVATE--X-",
            ),
            (
                "page_2_of",
                "PAGE_2_OF",
                "Page2Of",
                "page2Of",
                "PAGE_2_OF",
                "page-2-of",
                "PAGE-2-OF",
            ),
            // Non-ASCII letters are left as they are, as serde's ASCII case mapping does.
            (
                "größe_ä",
                "GRößE_ä",
                "Größeä",
                "größeä",
                "GRößE_ä",
                "größe-ä",
                "GRößE-ä",
            ),
        ] {
            assert_eq!(LowerCase.apply_to_field(original), original);
            assert_eq!(UpperCase.apply_to_field(original), upper);
            assert_eq!(PascalCase.apply_to_field(original), pascal);
            assert_eq!(CamelCase.apply_to_field(original), camel);
            assert_eq!(SnakeCase.apply_to_field(original), original);
            assert_eq!(ScreamingSnakeCase.apply_to_field(original), screaming);
            assert_eq!(KebabCase.apply_to_field(original), kebab);
            assert_eq!(ScreamingKebabCase.apply_to_field(original), screaming_kebab);
        }
    }

    #[test]
    fn names_are_serdes() {
        for (name, rule) in [
            ("lowercase", LowerCase),
            ("UPPERCASE", UpperCase),
            ("PascalCase", PascalCase),
            ("camelCase", CamelCase),
            ("snake_case", SnakeCase),
            ("SCREAMING_SNAKE_CASE", ScreamingSnakeCase),
            ("kebab-case", KebabCase),
            ("SCREAMING-KEBAB-CASE", ScreamingKebabCase),
        ] {
            assert_eq!(RenameRule::from_name(name), Some(rule));
        }
        assert_eq!(RenameRule::from_name("camelcase"), None);
    }
}
