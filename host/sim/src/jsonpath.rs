//! The JSONPath subset CRDs use in `additionalPrinterColumns` (the real server evaluates them
//! with kubectl's `jsonpath` package, missing keys allowed): `.field`, `['field']`, `[N]`
//! (negative from the end), `[*]`, and filters `[?(@.path == "value")]` (also `!=`, `<`,
//! `<=`, `>`, `>=` against a string, number or boolean, and `[?(@.path)]`, present and not
//! false). Ranges, unions, recursive descent and functions are not supported: a column using
//! them is refused when its CRD is registered.

use serde_json::Value;

/// A parsed path.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath(Vec<Step>);

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter(Filter),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    path: Vec<Step>,
    op: Option<(Op, Value)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl JsonPath {
    /// Parses `.status.conditions[?(@.type=="Ready")].status` (an enclosing `{...}` is
    /// accepted too, as kubectl's `-o jsonpath` writes it).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let text = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(text);
        let text = text.strip_prefix('$').unwrap_or(text);
        if !text.starts_with('.') && !text.starts_with('[') {
            return Err("must start with '.'".into());
        }
        let mut parser = Parser {
            chars: text.chars().collect(),
            at: 0,
        };
        let steps = parser.steps(false)?;
        if parser.at != parser.chars.len() {
            return Err(format!("unexpected {:?}", parser.rest()));
        }
        Ok(JsonPath(steps))
    }

    /// Every value the path reaches in `object`, in document order (empty: nothing there).
    pub fn find<'a>(&self, object: &'a Value) -> Vec<&'a Value> {
        eval(&self.0, object)
    }
}

fn eval<'a>(steps: &[Step], object: &'a Value) -> Vec<&'a Value> {
    let mut current = vec![object];
    for step in steps {
        let mut next = Vec::new();
        for value in current {
            match (step, value) {
                (Step::Field(f), Value::Object(m)) => next.extend(m.get(f)),
                (Step::Index(i), Value::Array(a)) => {
                    let i = if *i < 0 { a.len() as i64 + i } else { *i };
                    next.extend(usize::try_from(i).ok().and_then(|i| a.get(i)));
                }
                (Step::All, Value::Array(a)) => next.extend(a.iter()),
                (Step::All, Value::Object(m)) => next.extend(m.values()),
                (Step::Filter(f), Value::Array(a)) => {
                    next.extend(a.iter().filter(|item| f.matches(item)))
                }
                _ => {}
            }
        }
        current = next;
    }
    current
}

impl Filter {
    fn matches(&self, item: &Value) -> bool {
        let found = eval(&self.path, item);
        match &self.op {
            None => found
                .first()
                .is_some_and(|v| !matches!(v, Value::Bool(false))),
            Some((op, literal)) => found.iter().any(|v| compare(v, *op, literal)),
        }
    }
}

fn compare(value: &Value, op: Op, literal: &Value) -> bool {
    use std::cmp::Ordering;
    let ordering = match (value, literal) {
        (Value::Number(a), Value::Number(b)) => a
            .as_f64()
            .zip(b.as_f64())
            .and_then(|(a, b)| a.partial_cmp(&b)),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (a, b) if a == b => Some(Ordering::Equal),
        _ => None,
    };
    match op {
        Op::Eq => ordering == Some(Ordering::Equal),
        Op::Ne => ordering != Some(Ordering::Equal),
        Op::Lt => ordering == Some(Ordering::Less),
        Op::Le => matches!(ordering, Some(Ordering::Less | Ordering::Equal)),
        Op::Gt => ordering == Some(Ordering::Greater),
        Op::Ge => matches!(ordering, Some(Ordering::Greater | Ordering::Equal)),
    }
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn rest(&self) -> String {
        self.chars[self.at..].iter().collect()
    }

    fn eat(&mut self, s: &str) -> bool {
        let n = s.chars().count();
        if self.chars[self.at..].iter().take(n).copied().eq(s.chars()) {
            self.at += n;
            true
        } else {
            false
        }
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    /// Steps until the end, or (inside a filter) until an operator or `)`.
    fn steps(&mut self, in_filter: bool) -> Result<Vec<Step>, String> {
        let mut steps = Vec::new();
        loop {
            match self.peek() {
                None => return Ok(steps),
                Some('.') => {
                    self.at += 1;
                    if self.eat("*") {
                        steps.push(Step::All);
                        continue;
                    }
                    let start = self.at;
                    while self.peek().is_some_and(|c| {
                        !matches!(c, '.' | '[' | ')' | '=' | '!' | '<' | '>') && !c.is_whitespace()
                    }) {
                        self.at += 1;
                    }
                    if self.at == start {
                        if steps.is_empty() && !in_filter && self.peek().is_none() {
                            return Ok(steps); // "." alone: the object itself
                        }
                        if self.peek() == Some('[') {
                            continue; // ".[0]"
                        }
                        return Err(format!("empty field name before {:?}", self.rest()));
                    }
                    steps.push(Step::Field(self.chars[start..self.at].iter().collect()));
                }
                Some('[') => {
                    self.at += 1;
                    steps.push(self.bracket()?);
                }
                Some(_) if in_filter => return Ok(steps),
                Some(c) => return Err(format!("unexpected {c:?}")),
            }
        }
    }

    fn bracket(&mut self) -> Result<Step, String> {
        self.skip_spaces();
        let step = match self.peek() {
            Some('*') => {
                self.at += 1;
                Step::All
            }
            Some('\'' | '"') => Step::Field(self.quoted()?),
            Some('?') => {
                self.at += 1;
                self.skip_spaces();
                if !self.eat("(") {
                    return Err("a filter is written [?(...)]".into());
                }
                self.skip_spaces();
                if !self.eat("@") {
                    return Err("a filter starts with @".into());
                }
                let path = self.steps(true)?;
                self.skip_spaces();
                let op = [
                    ("==", Op::Eq),
                    ("!=", Op::Ne),
                    ("<=", Op::Le),
                    (">=", Op::Ge),
                    ("<", Op::Lt),
                    (">", Op::Gt),
                ]
                .into_iter()
                .find(|(s, _)| self.eat(s))
                .map(|(_, op)| op);
                let op = match op {
                    Some(op) => {
                        self.skip_spaces();
                        Some((op, self.literal()?))
                    }
                    None => None,
                };
                self.skip_spaces();
                if !self.eat(")") {
                    return Err(format!("expected ')' at {:?}", self.rest()));
                }
                Step::Filter(Filter { path, op })
            }
            _ => {
                let start = self.at;
                while self.peek().is_some_and(|c| c == '-' || c.is_ascii_digit()) {
                    self.at += 1;
                }
                let digits: String = self.chars[start..self.at].iter().collect();
                Step::Index(
                    digits
                        .parse()
                        .map_err(|_| format!("unsupported subscript at {:?}", self.rest()))?,
                )
            }
        };
        self.skip_spaces();
        if !self.eat("]") {
            return Err(format!("expected ']' at {:?}", self.rest()));
        }
        Ok(step)
    }

    fn quoted(&mut self) -> Result<String, String> {
        let quote = self.peek().ok_or("unterminated string")?;
        self.at += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated string".into()),
                Some('\\') => {
                    self.at += 1;
                    out.extend(self.peek());
                    self.at += 1;
                }
                Some(c) if c == quote => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(c) => {
                    out.push(c);
                    self.at += 1;
                }
            }
        }
    }

    fn literal(&mut self) -> Result<Value, String> {
        if matches!(self.peek(), Some('\'' | '"')) {
            return Ok(Value::String(self.quoted()?));
        }
        let start = self.at;
        while self.peek().is_some_and(|c| !c.is_whitespace() && c != ')') {
            self.at += 1;
        }
        let text: String = self.chars[start..self.at].iter().collect();
        match text.as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => serde_json::from_str::<serde_json::Number>(&text)
                .map(Value::Number)
                .map_err(|_| format!("unsupported literal {text:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn find(path: &str, object: &Value) -> Vec<Value> {
        JsonPath::parse(path)
            .unwrap()
            .find(object)
            .into_iter()
            .cloned()
            .collect()
    }

    #[test]
    fn the_forms_crds_use() {
        let o = json!({
            "metadata": {"name": "p", "labels": {"app.kubernetes.io/name": "x"}},
            "spec": {"appliesTo": {"names": ["team-a", "team-b"]}, "n": 3},
            "status": {"mode": "enforce", "conditions": [
                {"type": "Reconciling", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "Running"}]}
        });
        assert_eq!(find(".status.mode", &o), vec![json!("enforce")]);
        assert_eq!(
            find(".status.conditions[?(@.type==\"Ready\")].status", &o),
            vec![json!("True")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type == 'Ready')].reason", &o),
            vec![json!("Running")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type!=\"Ready\")].type", &o),
            vec![json!("Reconciling")]
        );
        assert_eq!(
            find(".spec.appliesTo.names", &o),
            vec![json!(["team-a", "team-b"])]
        );
        assert_eq!(find(".spec.appliesTo.names[1]", &o), vec![json!("team-b")]);
        assert_eq!(find(".spec.appliesTo.names[-1]", &o), vec![json!("team-b")]);
        assert_eq!(find(".spec.appliesTo.names[*]", &o).len(), 2);
        assert_eq!(
            find(".metadata.labels['app.kubernetes.io/name']", &o),
            vec![json!("x")]
        );
        assert_eq!(find("{.spec.n}", &o), vec![json!(3)]);
        assert_eq!(
            find(".status.conditions[?(@.reason)].type", &o),
            vec![json!("Ready")]
        );
        assert!(find(".status.missing.deeper", &o).is_empty());
        assert!(find(".status.conditions[?(@.type==\"Stalled\")].status", &o).is_empty());
        assert!(find(".status.mode.x", &o).is_empty());
    }

    #[test]
    fn unsupported_forms_are_refused() {
        for bad in [
            "status",
            ".a[",
            ".a[1:2]",
            ".a[?(@.x==)]",
            ".a..b",
            ".a[?(x)]",
        ] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
    }
}
