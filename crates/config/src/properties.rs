//! Java properties files (`java.util.Properties.load`), the format of
//! Kafka's `server.properties`, `meta.properties` and client config files.
//! Parsing is pure: the callers read the file and bound its size.

/// Reads the text of a Java properties file: `#` and `!` comments, `=`,
/// `:` or whitespace between key and value, backslash line continuations
/// and the escapes `\t \n \r \f \uXXXX` (any other escaped character
/// stands for itself). Pairs come in file order; a repeated key appears
/// twice, and the caller lets the last one win as Java does.
pub fn parse(text: &str) -> Vec<(String, String)> {
    let mut settings = Vec::new();
    let mut logical = String::new();
    for line in text.lines() {
        // Java strips leading whitespace, from continuation lines too.
        let line = line.trim_start();
        if logical.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        // An odd number of trailing backslashes continues the line.
        let trailing = line.len() - line.trim_end_matches('\\').len();
        if trailing % 2 == 1 {
            logical.push_str(&line[..line.len() - 1]);
            continue;
        }
        logical.push_str(line);
        settings.push(split_property(&logical));
        logical.clear();
    }
    if !logical.is_empty() {
        settings.push(split_property(&logical));
    }
    settings
}

/// Splits one logical line into an unescaped key and value.
fn split_property(line: &str) -> (String, String) {
    let mut chars = line.char_indices();
    let mut key_end = line.len();
    let mut value_start = line.len();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '=' | ':' => {
                key_end = i;
                value_start = i + 1;
                break;
            }
            c if c.is_whitespace() => {
                key_end = i;
                // Whitespace, then at most one separator, then whitespace.
                let rest = line[i..].trim_start();
                let rest = rest
                    .strip_prefix('=')
                    .or_else(|| rest.strip_prefix(':'))
                    .unwrap_or(rest);
                value_start = line.len() - rest.len();
                break;
            }
            _ => {}
        }
    }
    let value = line[value_start..].trim_start();
    (unescape(&line[..key_end]), unescape(value))
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(decoded) => out.push(decoded),
                    None => {
                        out.push('u');
                        out.push_str(&hex);
                    }
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn properties_files_follow_java() {
        let text = "# comment\n! also a comment\n\n  acks = all\nkey.separator=\\t\n\
                    client.id : my\\\n    client\nlinger.ms 7\nempty=\nsmile=\\u263a\nback\\=slash=x\\\\\n";
        assert_eq!(
            parse(text),
            pairs(&[
                ("acks", "all"),
                ("key.separator", "\t"),
                ("client.id", "myclient"),
                ("linger.ms", "7"),
                ("empty", ""),
                ("smile", "\u{263a}"),
                ("back=slash", "x\\"),
            ])
        );
    }
}
