//! GBNF (llama.cpp's grammar format, what vLLM's `guided_grammar` usually carries)
//! rewritten into llguidance's Lark dialect: `name ::= ...` rules become `name: ...`
//! (`root` is `start`), `[...]` character classes become `/[...]/` regexes, dashes
//! in rule names become underscores and `#` comments are dropped. String literals,
//! grouping, alternation and the `* + ? {m,n}` repeats mean the same in both.

/// Whether `text` uses GBNF's `::=` rule syntax (outside string literals).
pub fn is_gbnf(text: &str) -> bool {
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match (in_str, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => in_str = !in_str,
            (false, _, ':') if text[i..].starts_with("::=") => return true,
            _ => {}
        }
    }
    false
}

/// The Lark form of a GBNF grammar, one rule per line.
pub fn to_lark(gbnf: &str) -> Result<String, String> {
    let chars: Vec<char> = gbnf.chars().collect();
    let mut rules: Vec<String> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= chars.len() {
                    return Err("unterminated string literal".into());
                }
                i += 1;
                push(&mut rules, &chars[start..i].iter().collect::<String>())?;
            }
            '[' => {
                let mut class = String::from("/[");
                i += 1;
                while i < chars.len() && chars[i] != ']' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        class.push('\\');
                        class.push(chars[i + 1]);
                        i += 2;
                        continue;
                    }
                    if chars[i] == '/' {
                        class.push('\\');
                    }
                    class.push(chars[i]);
                    i += 1;
                }
                if i >= chars.len() {
                    return Err("unterminated character class".into());
                }
                i += 1;
                class.push_str("]/");
                push(&mut rules, &class)?;
            }
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '-')
                {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                let defines = chars[j..].starts_with(&[':', ':', '=']);
                let name = rule_name(&name);
                if defines {
                    rules.push(format!("{name}:"));
                    i = j + 3;
                } else {
                    push(&mut rules, &name)?;
                }
            }
            c if c.is_whitespace() => i += 1,
            _ => {
                push(&mut rules, &c.to_string())?;
                i += 1;
            }
        }
    }
    if rules.is_empty() {
        return Err("the grammar has no rules".into());
    }
    Ok(rules.join("\n"))
}

fn rule_name(name: &str) -> String {
    if name == "root" {
        "start".into()
    } else {
        name.to_ascii_lowercase().replace('-', "_")
    }
}

/// Appends a token to the rule being written.
fn push(rules: &mut [String], token: &str) -> Result<(), String> {
    let rule = rules
        .last_mut()
        .ok_or_else(|| format!("{token:?} appears before the first `name ::=` rule"))?;
    rule.push(' ');
    rule.push_str(token);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_classes_and_comments_are_rewritten() {
        let g = "# a list\nroot ::= item (\",\" item)*\nitem ::= [a-z/]+ | \"x::=y\" | my-num\nmy-num ::= [0-9]{1,3}";
        assert!(is_gbnf(g));
        assert_eq!(
            to_lark(g).unwrap(),
            "start: item ( \",\" item ) *\nitem: /[a-z\\/]/ + | \"x::=y\" | my_num\nmy_num: /[0-9]/ { 1 , 3 }"
        );
        assert!(!is_gbnf("start: \"a ::= b\""));
        assert!(to_lark("\"a\" root ::= x").is_err());
        assert!(to_lark("root ::= \"open").is_err());
    }
}
