//! A minimal unpickler: Python pickle (protocols 2-5) into a tree of values, executing
//! nothing.
//!
//! It covers what `torch.save` writes for a checkpoint of tensors and plain Python values,
//! and what pickling a `tiktoken.Encoding` writes. Globals are kept as names, calls
//! (`REDUCE`, `NEWOBJ`) and `BUILD` as nodes; the caller interprets the few it expects.
//! Memo entries are copies taken when stored, which is exact for these files: they only
//! fetch back globals, strings and tuples, never a container filled after it was stored.

use std::collections::HashMap;

/// A decoded pickle value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    /// Key-value pairs in insertion order.
    Dict(Vec<(Value, Value)>),
    /// A reference to `module.name` (a class or function), not resolved.
    Global {
        module: String,
        name: String,
    },
    /// `func(*args)` from `REDUCE`, or `cls.__new__(cls, *args)` from `NEWOBJ`.
    Call {
        func: Box<Value>,
        args: Box<Value>,
    },
    /// `obj.__setstate__(state)` from `BUILD`.
    Build {
        obj: Box<Value>,
        state: Box<Value>,
    },
    /// A persistent id (`BINPERSID`): how torch refers to tensor storages.
    Persistent(Box<Value>),
}

impl Value {
    /// Whether this is the global `module.name`.
    pub fn is_global(&self, module: &str, name: &str) -> bool {
        matches!(self, Value::Global { module: m, name: n } if m == module && n == name)
    }

    /// The entries of a dict, or of an `OrderedDict()` that items were set on.
    pub fn as_dict(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Dict(items) => Some(items),
            _ => None,
        }
    }

    /// The value under string key `key` of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_dict()?
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
            .map(|(_, v)| v)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_tuple(&self) -> Option<&[Value]> {
        match self {
            Value::Tuple(items) => Some(items),
            _ => None,
        }
    }
}

/// Why a pickle could not be read, and the offset of the opcode concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PickleError {
    pub offset: u64,
    pub reason: String,
}

type Result<T> = std::result::Result<T, PickleError>;

/// Decodes one pickle (up to its `STOP`).
pub(crate) fn parse(data: &[u8]) -> Result<Value> {
    Unpickler {
        data,
        pos: 0,
        op_at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    }
    .run()
}

struct Unpickler<'a> {
    data: &'a [u8],
    pos: usize,
    /// Offset of the opcode being executed, for errors.
    op_at: usize,
    stack: Vec<Value>,
    /// Stack lengths at each `MARK`.
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

impl Unpickler<'_> {
    fn err<T>(&self, reason: impl Into<String>) -> Result<T> {
        Err(PickleError {
            offset: self.op_at as u64,
            reason: reason.into(),
        })
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(end) => {
                let bytes = &self.data[self.pos..end];
                self.pos = end;
                Ok(bytes)
            }
            None => self.err(format!(
                "needs {n} bytes, {} left",
                self.data.len() - self.pos
            )),
        }
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn len_u32(&mut self) -> Result<usize> {
        Ok(u32::from_le_bytes(self.le()?) as usize)
    }

    fn len_u64(&mut self) -> Result<usize> {
        let n = u64::from_le_bytes(self.le()?);
        match usize::try_from(n) {
            Ok(n) => Ok(n),
            Err(_) => self.err(format!("length {n} does not fit in memory")),
        }
    }

    fn utf8(&mut self, n: usize) -> Result<Value> {
        let bytes = self.take(n)?.to_vec();
        match String::from_utf8(bytes) {
            Ok(s) => Ok(Value::Str(s)),
            Err(_) => self.err("string is not valid UTF-8"),
        }
    }

    /// Text up to the next newline (the argument of `GLOBAL`).
    fn line(&mut self) -> Result<String> {
        let rest = &self.data[self.pos..];
        let Some(n) = rest.iter().position(|&b| b == b'\n') else {
            return self.err("unterminated line");
        };
        let text = String::from_utf8(rest[..n].to_vec());
        self.pos += n + 1;
        match text {
            Ok(t) => Ok(t),
            Err(_) => self.err("line is not valid UTF-8"),
        }
    }

    fn pop(&mut self) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return self.err("stack underflow");
        }
        match self.stack.pop() {
            Some(v) => Ok(v),
            None => self.err("stack underflow"),
        }
    }

    fn top(&mut self) -> Result<&mut Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return self.err("stack underflow");
        }
        let offset = self.op_at as u64;
        self.stack.last_mut().ok_or_else(|| PickleError {
            offset,
            reason: "stack underflow".into(),
        })
    }

    /// Everything pushed since the last `MARK`, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Value>> {
        let Some(mark) = self.marks.pop() else {
            return self.err("no MARK to pop to");
        };
        Ok(self.stack.split_off(mark))
    }

    fn memo_put(&mut self, index: u32) -> Result<()> {
        let v = self.top()?.clone();
        self.memo.insert(index, v);
        Ok(())
    }

    fn memo_get(&mut self, index: u32) -> Result<()> {
        match self.memo.get(&index) {
            Some(v) => {
                let v = v.clone();
                self.stack.push(v);
                Ok(())
            }
            None => self.err(format!("memo entry {index} was never stored")),
        }
    }

    fn set_items(&mut self, items: Vec<Value>) -> Result<()> {
        if !items.len().is_multiple_of(2) {
            return self.err("odd number of dict items");
        }
        let target = self.top()?;
        // An `OrderedDict()` call whose items follow becomes a plain (ordered) dict.
        if let Value::Call { func, args } = target {
            if func.is_global("collections", "OrderedDict")
                && matches!(**args, Value::Tuple(ref a) if a.is_empty())
            {
                *target = Value::Dict(Vec::new());
            }
        }
        let Value::Dict(dict) = target else {
            return self.err("SETITEM(S) on a value that is not a dict");
        };
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            dict.push((k, v));
        }
        Ok(())
    }

    fn append(&mut self, items: Vec<Value>) -> Result<()> {
        match self.top()? {
            Value::List(list) => {
                list.extend(items);
                Ok(())
            }
            _ => self.err("APPEND(S) on a value that is not a list"),
        }
    }

    fn tuple(&mut self, n: usize) -> Result<()> {
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.pop()?);
        }
        items.reverse();
        self.stack.push(Value::Tuple(items));
        Ok(())
    }

    fn run(mut self) -> Result<Value> {
        loop {
            self.op_at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    // PROTO
                    let proto = self.u8()?;
                    if !(2..=5).contains(&proto) {
                        return self.err(format!("pickle protocol {proto} (supported: 2 to 5)"));
                    }
                }
                0x95 => {
                    // FRAME: a length hint only.
                    self.take(8)?;
                }
                b'.' => {
                    // STOP
                    let v = self.pop()?;
                    return Ok(v);
                }
                b'(' => self.marks.push(self.stack.len()),
                b'}' => self.stack.push(Value::Dict(Vec::new())),
                b']' => self.stack.push(Value::List(Vec::new())),
                b')' => self.stack.push(Value::Tuple(Vec::new())),
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Tuple(items));
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::List(items));
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Dict(Vec::new()));
                    self.set_items(items)?;
                }
                0x85 => self.tuple(1)?,
                0x86 => self.tuple(2)?,
                0x87 => self.tuple(3)?,
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.set_items(vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.set_items(items)?;
                }
                b'a' => {
                    let v = self.pop()?;
                    self.append(vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.append(items)?;
                }
                b'q' => {
                    let i = self.u8()?;
                    self.memo_put(u32::from(i))?;
                }
                b'r' => {
                    let i = u32::from_le_bytes(self.le()?);
                    self.memo_put(i)?;
                }
                0x94 => {
                    let i = u32::try_from(self.memo.len()).unwrap_or(u32::MAX);
                    self.memo_put(i)?;
                }
                b'h' => {
                    let i = self.u8()?;
                    self.memo_get(u32::from(i))?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(self.le()?);
                    self.memo_get(i)?;
                }
                b'J' => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.stack.push(Value::Int(i64::from(v)));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.stack.push(Value::Int(i64::from(v)));
                }
                0x8a => {
                    // LONG1: little-endian two's complement of n bytes.
                    let n = usize::from(self.u8()?);
                    if n > 8 {
                        return self.err(format!("integer of {n} bytes does not fit in 64 bits"));
                    }
                    let bytes = self.take(n)?;
                    let mut buf = if bytes.last().is_some_and(|&b| b & 0x80 != 0) {
                        [0xff; 8]
                    } else {
                        [0; 8]
                    };
                    buf[..n].copy_from_slice(bytes);
                    self.stack.push(Value::Int(i64::from_le_bytes(buf)));
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.le()?);
                    self.stack.push(Value::Float(v));
                }
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'X' => {
                    let n = self.len_u32()?;
                    let v = self.utf8(n)?;
                    self.stack.push(v);
                }
                0x8c => {
                    let n = usize::from(self.u8()?);
                    let v = self.utf8(n)?;
                    self.stack.push(v);
                }
                0x8d => {
                    let n = self.len_u64()?;
                    let v = self.utf8(n)?;
                    self.stack.push(v);
                }
                b'B' => {
                    let n = self.len_u32()?;
                    let v = self.take(n)?.to_vec();
                    self.stack.push(Value::Bytes(v));
                }
                b'C' => {
                    let n = usize::from(self.u8()?);
                    let v = self.take(n)?.to_vec();
                    self.stack.push(Value::Bytes(v));
                }
                0x8e => {
                    let n = self.len_u64()?;
                    let v = self.take(n)?.to_vec();
                    self.stack.push(Value::Bytes(v));
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.stack.push(Value::Global { module, name });
                }
                0x93 => {
                    // STACK_GLOBAL
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (module, name) {
                        (Value::Str(module), Value::Str(name)) => {
                            self.stack.push(Value::Global { module, name })
                        }
                        _ => return self.err("STACK_GLOBAL needs two strings"),
                    }
                }
                b'R' | 0x81 => {
                    // REDUCE, NEWOBJ
                    let args = self.pop()?;
                    let func = self.pop()?;
                    self.stack.push(Value::Call {
                        func: Box::new(func),
                        args: Box::new(args),
                    });
                }
                b'b' => {
                    let state = self.pop()?;
                    let obj = self.pop()?;
                    self.stack.push(Value::Build {
                        obj: Box::new(obj),
                        state: Box::new(state),
                    });
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.stack.push(Value::Persistent(Box::new(pid)));
                }
                other => return self.err(format!("unsupported opcode 0x{other:02x}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_protocol_4_dict_with_memo_and_globals() {
        // pickle.dumps({'a': (1, -2, 300), 'b': b'xy', 'c': [True, None, 1.5], 'd': 'é'}, 4)
        // followed by a hand-made global call; written out opcode by opcode.
        let mut p = vec![0x80, 4, b'}', 0x94, b'('];
        p.extend([0x8c, 1, b'a', 0x94, b'K', 1, b'J']);
        p.extend((-2i32).to_le_bytes());
        p.extend([b'M', 44, 1, 0x87, 0x94]);
        p.extend([0x8c, 1, b'b', b'C', 2, b'x', b'y']);
        p.extend([0x8c, 1, b'c', b']', b'(', 0x88, b'N', b'G']);
        p.extend(1.5f64.to_be_bytes());
        p.extend([b'e']);
        p.extend([0x8c, 1, b'd', 0x8c, 2, 0xc3, 0xa9]);
        p.extend([
            0x8c, 1, b'e', 0x8c, 1, b'm', 0x8c, 1, b'f', 0x93, b'h', 1, 0x85, b'R',
        ]);
        p.extend([0x8c, 1, b'g', 0x8a, 2, 0x00, 0x80]);
        p.extend([b'u', b'.']);
        let v = parse(&p).expect("valid pickle");
        assert_eq!(
            v.get("a"),
            Some(&Value::Tuple(vec![
                Value::Int(1),
                Value::Int(-2),
                Value::Int(300)
            ]))
        );
        assert_eq!(v.get("b"), Some(&Value::Bytes(b"xy".to_vec())));
        assert_eq!(
            v.get("c"),
            Some(&Value::List(vec![
                Value::Bool(true),
                Value::None,
                Value::Float(1.5)
            ]))
        );
        assert_eq!(v.get("d").and_then(Value::as_str), Some("é"));
        let Some(Value::Call { func, args }) = v.get("e") else {
            panic!("e is not a call: {:?}", v.get("e"));
        };
        assert!(func.is_global("m", "f"));
        assert_eq!(**args, Value::Tuple(vec![Value::Str("a".into())]));
        assert_eq!(v.get("g").and_then(Value::as_int), Some(-32768));
    }

    #[test]
    fn malformed_input_is_an_error_with_an_offset() {
        let cases: [(&[u8], u64); 5] = [
            (&[0x80, 4, b'K'], 2),       // truncated argument
            (&[0x80, 4, b'.'], 2),       // STOP on an empty stack
            (&[0x80, 9], 0),             // unknown protocol
            (&[0x80, 2, b'h', 3], 2),    // memo entry never stored
            (&[0x80, 2, b'N', 0xff], 3), // unknown opcode
        ];
        for (data, offset) in cases {
            let err = parse(data).expect_err("must fail");
            assert_eq!(err.offset, offset, "{data:?}: {}", err.reason);
        }
    }
}
