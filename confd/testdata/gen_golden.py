# Builds golden confd packets exactly as Ganeti's Python library does
# (lib/serializer.py DumpSignedJson, lib/utils/hash.py Sha1Hmac,
# lib/confd/__init__.py PackMagic), with the test key below. Run:
#   python3 testdata/gen_golden.py > testdata/golden.json
# The Go tests check that confd accepts these packets unchanged, and the
# second half (verify) checks packets confd built, as Ganeti's
# LoadSignedJson would.
import hmac, json, re, sys
from hashlib import sha1

KEY = "0123456789abcdef0123456789abcdef01234567\n"  # 40 hex + newline, as GenerateHmacKey writes

_RE_EOLSP = re.compile("[ \t]+$", re.MULTILINE)

def dump_json(data):
    txt = _RE_EOLSP.sub("", json.dumps(data))
    if not txt.endswith("\n"):
        txt += "\n"
    return txt

def sha1_hmac(key, msg, salt):
    return hmac.new(key.encode("utf-8"), (salt + msg).encode("utf-8"), sha1).hexdigest()

def dump_signed(data, key, salt):
    txt = dump_json(data)
    return dump_json({"msg": txt, "salt": salt, "hmac": sha1_hmac(key, txt, salt)})

def load_signed(txt, key):
    d = json.loads(txt)
    msg, salt, mac = d["msg"], d["salt"], d["hmac"]
    if mac.lower() != sha1_hmac(key, msg, salt).lower():
        raise ValueError("Invalid Signature")
    return json.loads(msg), salt

if len(sys.argv) > 1 and sys.argv[1] == "verify":
    # stdin: {"packets": ["plj0...", ...]}; prints each decoded message
    for p in json.load(sys.stdin)["packets"]:
        assert p.startswith("plj0")
        print(json.dumps(load_signed(p[4:], KEY), sort_keys=True))
    sys.exit(0)

golden = []
def add(name, data, salt):
    golden.append({"name": name, "packet": "plj0" + dump_signed(data, KEY, salt), "msg": dump_json(data), "salt": salt})

# The two examples of the confd design (seed 003), re-signed with KEY.
# Key order as the design shows them (Python 3 keeps insertion order).
add("design-request", {"type": 1, "rsalt": "9aa6ce92-8336-11de-af38-001d093e835f", "protocol": 1,
                       "query": "node1.example.com"}, "1249637704")
add("design-reply", {"status": 0, "answer": 0, "serial": 42, "protocol": 1},
    "9aa6ce92-8336-11de-af38-001d093e835f")
# More requests as Ganeti's client builds them (ConfdClientRequest.ToDict).
add("pip-by-ip", {"protocol": 1, "type": 2, "query": {"0": "br0", "1": "192.0.2.10"},
                  "rsalt": "6f1c3b2a-0000-4000-8000-000000000001"}, "1700000000")
add("pip-by-iplist", {"protocol": 1, "type": 2, "query": {"2": ["192.0.2.10", "192.0.2.11"]},
                      "rsalt": "6f1c3b2a-0000-4000-8000-000000000002"}, "1700000000")
add("master-fields", {"protocol": 1, "type": 3, "query": {"3": [0, 1, 2]},
                      "rsalt": "6f1c3b2a-0000-4000-8000-000000000003"}, "1700000000")
add("ping-null-query", {"protocol": 1, "type": 0, "query": None,
                        "rsalt": "6f1c3b2a-0000-4000-8000-000000000004"}, "1700000000")
add("non-ascii-query", {"protocol": 1, "type": 1, "query": "n\u00f6de-\U0001F600",
                        "rsalt": "6f1c3b2a-0000-4000-8000-000000000005"}, "1700000000")
json.dump({"key": KEY, "golden": golden}, sys.stdout, indent=1)
print()
