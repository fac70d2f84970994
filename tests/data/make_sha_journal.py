import json, subprocess, sys, os, tempfile
binary, out = sys.argv[1], sys.argv[2]
root = tempfile.mkdtemp(prefix="17d-fixture-")
p = subprocess.Popen([binary, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
n = 0
def call(method, params):
    global n
    n += 1
    body = json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}).encode()
    p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body); p.stdin.flush()
    while True:
        length = None
        while True:
            line = p.stdout.readline()
            if line in (b"\r\n", b""): break
            if line.lower().startswith(b"content-length:"): length = int(line.split(b":")[1])
        msg = json.loads(p.stdout.read(length))
        if msg.get("id") == n: return msg
def notify(method, params):
    body = json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode()
    p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body); p.stdin.flush()
print(call("initialize", {"processId": None, "rootUri": "file://" + root, "initializationOptions": {}})["result"]["serverInfo"], file=sys.stderr)
notify("initialized", {})
big = "".join("line %04d of the first big output\n" % i for i in range(3000))
big2 = [{"type": "text", "text": "".join("row %05d\n" % i for i in range(9000))}]
asst = {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "Bash", "input": {"command": "ls"}} for i in ["toolu_big", "toolu_blocks", "toolu_small"]]}
user = {"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": "toolu_big", "content": big},
    {"type": "tool_result", "tool_use_id": "toolu_blocks", "content": big2},
    {"type": "tool_result", "tool_use_id": "toolu_small", "content": "small output\n\t\"quoted\" é"}]}
r = call("budget/apply", {"sessionId": "old", "messages": [asst, user]})
print(json.dumps(r["result"]["records"])[:300], file=sys.stderr)
sent = r["result"]["messages"]
for m in sent:
    print(call("pair/append", {"sessionId": "old", "message": m}).get("result"), file=sys.stderr)
call("shutdown", None); notify("exit", None); p.wait()
src = os.path.join(root, ".toolwire/sessions/old.jsonl")

open(out, "w").write(open(src).read())
os.system("rm -rf " + root)
