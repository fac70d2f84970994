-- Headless test of the plugin as a user installs it (see test/run.sh):
-- the real toolwire binary behind `serve --shared`, every command.
-- Exits 0 when every check passed, 1 with the failure on stderr.
local root = assert(os.getenv("TW_ROOT"), "TW_ROOT")
local tw = require("toolwire")
local commands = require("toolwire.commands")

local messages = {}
vim.notify = function(msg, level)
  table.insert(messages, { msg = msg, level = level })
end
local function last_message()
  return messages[#messages] and messages[#messages].msg or ""
end

local function fail(msg)
  io.stderr:write("nvim plugin test FAILED: " .. msg .. "\n" .. vim.inspect(messages) .. "\n")
  vim.cmd("cquit 1")
end
local function check(cond, what)
  if not cond then
    fail(what)
  end
end
local function wait(pred, what)
  check(vim.wait(60000, pred, 20), "timed out: " .. what)
end
local function line(message)
  return vim.json.encode({ type = "message", message = message })
end
local function call(id)
  return { role = "assistant", content = { { type = "tool_use", id = id, name = "Bash", input = { command = "make" } } } }
end
local function result(id, text)
  return { role = "user", content = { { type = "tool_result", tool_use_id = id, content = text } } }
end

local ok, err = xpcall(function()
  -- setup{} started the client from init.lua.
  local client = tw.client()
  check(client ~= nil, "setup{} started no client: " .. last_message())
  check(client.name == "toolwire", "client name")

  -- request(): budget/apply, typed error objects.
  local big = {}
  for i = 1, 3000 do
    big[i] = string.format("build line %d: %s", i, string.rep("x", 20))
  end
  local text = table.concat(big, "\n")
  local applied, rerr = tw.request_sync("budget/apply", { sessionId = "nv", messages = { call("t1"), result("t1", text) } })
  check(rerr == nil, "budget/apply: " .. vim.inspect(rerr))
  check(#applied.persisted == 1 and applied.persisted[1].toolUseId == "t1", "one persisted result")
  local caps = tw.client().server_capabilities.experimental.toolwire
  check(vim.tbl_contains(caps.methods, "budget/apply"), "capabilities list the methods")

  local got
  tw.request("pair/append", { sessionId = "nv", message = result("zz", "late") }, function(e, r)
    got = { err = e, result = r }
  end)
  wait(function() return got ~= nil end, "pair/append answer")
  check(got.err and got.err.code == -32010 and got.err.data.kind == "unknownToolResult", "unknownToolResult: " .. vim.inspect(got))

  -- :ToolwireShow on the line that names the saved output.
  local preview = applied.messages[2].content[1].content
  vim.cmd("enew")
  vim.api.nvim_buf_set_lines(0, 0, -1, false, vim.split(preview, "\n", { plain = true }))
  vim.api.nvim_win_set_cursor(0, { 2, 0 })
  check(vim.api.nvim_get_current_line():find("Full output saved to:", 1, true), "cursor on the saved path")
  vim.cmd("ToolwireShow")
  wait(function() return vim.api.nvim_buf_get_name(0):find("toolwire://nv/t1", 1, true) end, "the saved output's buffer")
  local shown = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
  check(shown == text, "ToolwireShow shows the whole original")
  vim.cmd("ToolwireShow nv nope")
  wait(function() return last_message():find("artifactNotFound", 1, true) end, "ToolwireShow of an unknown id")

  -- A broken transcript: a call without its result, then text.
  local path = root .. "/broken.jsonl"
  vim.fn.writefile({
    line({ role = "user", content = "hi" }),
    line(call("o1")),
    line({ role = "user", content = "where is my result?" }),
    line(call("k1")),
    line(result("k1", "fine")),
  }, path)
  local original = vim.fn.readfile(path)

  -- :ToolwireCheck fills the quickfix list with the provider's verdict.
  vim.cmd("edit " .. path)
  local has_check = vim.tbl_contains(caps.methods, "transcript/check")
  commands.last_check = nil
  vim.cmd("ToolwireCheck")
  if has_check then
    wait(function() return commands.last_check ~= nil end, "check result")
    check(commands.last_check.ok == false, "check says not ok")
    local qf = vim.fn.getqflist()
    check(#qf >= 1, "violations in the quickfix list")
    check(qf[1].lnum == 2 and qf[1].text:find("o1", 1, true), "violation points at the call's line: " .. vim.inspect(qf[1]))
  else
    -- A server without the method (older toolwire) is named as such.
    wait(function() return last_message():find("does not know transcript/check", 1, true) end, "check on an old server")
  end

  -- The repair preview changes nothing of the original.
  local copy, perr, presult, dir = commands.preview(tw, path)
  check(copy ~= nil, "preview: " .. tostring(perr))
  check(vim.deep_equal(presult.droppedToolUses, { "o1" }), "preview drops o1")
  check(#vim.fn.readfile(copy) == 4, "the repaired copy has 4 lines")
  vim.fn.delete(dir, "rf")
  check(vim.deep_equal(vim.fn.readfile(path), original), "preview leaves the original alone")
  check(vim.fn.filereadable(path .. ".bak") == 0, "no .bak from a preview")

  -- :ToolwireRepair! writes at once; the buffer shows the new content.
  vim.cmd("ToolwireRepair!")
  check(commands.last_repair and vim.deep_equal(commands.last_repair.droppedToolUses, { "o1" }), "repair drops o1")
  check(vim.fn.filereadable(path .. ".bak") == 1, "the original is kept as .bak")
  check(#vim.api.nvim_buf_get_lines(0, 0, -1, false) == 4, "the buffer was reloaded")
  vim.cmd("ToolwireRepair!")
  check(vim.deep_equal(commands.last_repair.droppedToolUses, {}), "a valid transcript: nothing dropped")

  -- Where the binary is looked for.
  local none, why = tw.locate("/nonexistent/toolwire")
  check(none == nil and why:find("setup{binary}: /nonexistent/toolwire (does not exist)", 1, true), why)
  local saved_bin, saved_path = vim.env.TOOLWIRE_BIN, vim.env.PATH
  vim.env.TOOLWIRE_BIN, vim.env.PATH = nil, root .. "/empty"
  none, why = tw.locate(nil)
  vim.env.TOOLWIRE_BIN, vim.env.PATH = saved_bin, saved_path
  check(none == nil and why:find("TOOLWIRE_BIN: not set", 1, true) and why:find("PATH: no executable 'toolwire' in " .. root .. "/empty", 1, true), why)

  -- Cancelling during a call: a budget/apply queued behind a long
  -- state/reconstruct of the same session is cancelled before it runs; its
  -- callback is called with -32800 (Neovim drops that answer: the plugin
  -- calls the callback itself).
  local big_path = root .. "/big.jsonl"
  local chunk = {}
  for i = 1, 300 do
    table.insert(chunk, line(call("r" .. i)))
    table.insert(chunk, line(result("r" .. i, string.rep("y", 100000))))
  end
  vim.fn.writefile(chunk, big_path)
  local rebuilt, cancelled_answer
  tw.request("state/reconstruct", { sessionId = "big", transcript = big_path }, function(e, r)
    rebuilt = { err = e, result = r }
  end)
  local cid = tw.request("budget/apply", { sessionId = "big", messages = { result("c1", string.rep("z", 60000)) } }, function(e, r)
    check(cancelled_answer == nil, "the callback is called once")
    cancelled_answer = { err = e, result = r }
  end)
  tw.cancel(cid)
  wait(function() return rebuilt ~= nil and cancelled_answer ~= nil end, "reconstruct and the cancelled apply")
  check(rebuilt.err == nil and rebuilt.result.seenCount == 300, "reconstruct: " .. vim.inspect(rebuilt.err))
  check(cancelled_answer.err and cancelled_answer.err.code == -32800 and cancelled_answer.err.data.kind == "cancelled", "cancelled: " .. vim.inspect(cancelled_answer))
  local state = tw.request_sync("state/get", { sessionId = "big" })
  check(not vim.tbl_contains(state.seenIds, "c1"), "a cancelled apply decides nothing")

  -- Stopping ends the client's process (shutdown + exit).
  local id = tw.client().id
  tw.stop()
  wait(function() return vim.lsp.get_client_by_id(id) == nil end, "client stopped")

  local function errors()
    local list = {}
    for _, m in ipairs(messages) do
      if m.level == vim.log.levels.ERROR and m.msg:find("^toolwire: ") then
        table.insert(list, m.msg)
      end
    end
    return list
  end

  -- A configuration the server refuses: requests say the real reason,
  -- never "send `initialize` first" (Neovim shows the refusal itself).
  messages = {}
  tw.setup({ config = { abortMode = "explode" } })
  local _, cerr = tw.request_sync("state/get", { sessionId = "nv" })
  check(cerr and cerr.message:find("initialize` failed", 1, true) and cerr.message:find("abortMode", 1, true), "refused config: " .. vim.inspect(cerr))
  check(not cerr.message:find("send `initialize` first", 1, true), cerr.message)
  wait(function() return tw.client() == nil end, "the refused client is stopped")
  check(#errors() == 0, vim.inspect(errors()))

  -- A binary that dies at start: one error naming it, its exit status and
  -- the first lines of its stderr.
  local dying = root .. "/dying"
  vim.fn.writefile({ "#!/bin/sh", "echo 'cannot open the store: permission denied' >&2", "echo 'second line' >&2", "exit 3" }, dying)
  vim.fn.setfperm(dying, "rwxr-xr-x")
  messages = {}
  tw.setup({ binary = dying })
  wait(function() return #errors() > 0 end, "the dying binary is told")
  local told = errors()[1]
  check(#errors() == 1, vim.inspect(errors()))
  check(told:find(dying .. " exited (status 3) before initializing:\ncannot open the store: permission denied\nsecond line", 1, true), told)
  local _, derr = tw.request_sync("state/get", { sessionId = "nv" })
  check(derr and derr.message:find(dying .. " exited (status 3)", 1, true), "a request to the dying binary: " .. vim.inspect(derr))
end, debug.traceback)

if not ok then
  fail(err)
end
io.stderr:write("nvim plugin test passed (neovim " .. tostring(vim.version().major) .. "." .. tostring(vim.version().minor) .. "." .. tostring(vim.version().patch) .. ")\n")
vim.cmd("qa!")
