-- toolwire for Neovim: starts the workspace's shared toolwire daemon
-- (`toolwire serve --shared`) as an LSP client, so every Lua agent plugin
-- of the editor shares one connection, and gives them `request()`.
--
-- Works on Neovim 0.7.2 (Debian 12), through vim.lsp.start_client, and on
-- 0.8+ through vim.lsp.start (which reuses a running client of the same
-- name and root). toolwire announces no text-document capabilities, so
-- Neovim sends it no buffer traffic.
local M = {}

local defaults = {
  -- The toolwire binary; else $TOOLWIRE_BIN, else `toolwire` on PATH.
  binary = nil,
  -- The workspace root; default: the current directory.
  root = nil,
  -- `serve --shared` (one daemon per workspace) or `serve` (private).
  shared = true,
  -- With `shared`: seconds the daemon outlives its last client (toolwire's default when nil).
  idle_timeout = nil,
  -- initializationOptions: overrides of the workspace's toolwire.toml.
  config = {},
  -- Start when setup() is called (else on the first request or command).
  autostart = true,
}

M.options = vim.deepcopy(defaults)
local client_id = nil

local function notify(msg, level)
  vim.notify("toolwire: " .. msg, level or vim.log.levels.INFO)
end

local function executable_problem(path)
  local stat = (vim.uv or vim.loop).fs_stat(path)
  if not stat then
    return "does not exist"
  end
  if stat.type ~= "file" then
    return "not a file"
  end
  if vim.fn.executable(path) ~= 1 then
    return "not executable"
  end
  return nil
end

--- The toolwire binary, or nil and an error naming every place looked at.
function M.locate(binary)
  local searched = {}
  if binary and binary ~= "" then
    local path = vim.fn.fnamemodify(vim.fn.expand(binary), ":p")
    local problem = executable_problem(path)
    if not problem then
      return path
    end
    -- An explicit setting that does not work is an error, never a reason to
    -- run some other toolwire.
    return nil, string.format("binary not found; looked at:\n  - setup{binary}: %s (%s)", path, problem)
  end
  table.insert(searched, "setup{binary}: not set")
  local env = vim.env.TOOLWIRE_BIN
  if env and env ~= "" then
    local path = vim.fn.fnamemodify(env, ":p")
    local problem = executable_problem(path)
    if not problem then
      return path
    end
    table.insert(searched, string.format("TOOLWIRE_BIN: %s (%s)", path, problem))
    return nil, "binary not found; looked at:\n  - " .. table.concat(searched, "\n  - ")
  end
  table.insert(searched, "TOOLWIRE_BIN: not set")
  local found = vim.fn.exepath("toolwire")
  if found ~= "" then
    return found
  end
  table.insert(searched, "PATH: no executable 'toolwire' in " .. (vim.env.PATH or "(empty)"))
  return nil, "binary not found; looked at:\n  - " .. table.concat(searched, "\n  - ")
end

local function root_dir()
  return vim.fn.fnamemodify(M.options.root or vim.fn.getcwd(), ":p"):gsub("/$", "")
end

-- 0.11 made the client's functions methods (`client:request`); the dot
-- form still works there but warns. `rpc` (the connection) kept the dot
-- form in every version.
local methods = vim.fn.has("nvim-0.11") == 1
local function client_is_stopped(client)
  if methods then
    return client:is_stopped()
  end
  return client.is_stopped()
end

-- Each client's (by id) state: whether `initialize` was answered, the
-- answer functions of its requests still waiting, and how it ended.
local clients = {}

-- The first lines of a server's stderr, for the error when it dies while
-- starting. Neovim sends a server's stderr only to its LSP log
-- (`log.error("rpc", <binary>, "stderr", chunk)` in 0.7 to 0.11) and has no
-- hook for it, so the log function is wrapped once to keep a copy of what
-- the toolwire binaries write there.
local stderr_of = {}
local function keep_stderr()
  local log = require("vim.lsp.log")
  if log.toolwire_wrapped then
    return
  end
  local error = log.error
  log.error = function(...)
    local source, binary, stream, chunk = ...
    if source == "rpc" and stream == "stderr" and type(chunk) == "string" and stderr_of[binary] then
      stderr_of[binary] = (stderr_of[binary] .. chunk):sub(1, 4000)
    end
    return error(...)
  end
  log.toolwire_wrapped = true
end

local function first_lines(text, n)
  local lines = vim.split(vim.trim(text or ""), "\n", { plain = true })
  if #lines > n then
    lines = vim.list_slice(lines, 1, n)
    table.insert(lines, "...")
  end
  return table.concat(lines, "\n")
end

-- The client's process ended: every request still waiting is answered
-- with `err`. One that ended while starting is told to the user once: by
-- the waiting requests' callbacks, or here when none waits (setup's
-- autostart).
local function ended(id, err)
  local state = clients[id]
  if not state then
    return
  end
  clients[id] = nil
  local waiting = vim.tbl_values(state.pending)
  if #waiting == 0 and not state.initialized and not state.refused then
    notify(err.message, vim.log.levels.ERROR)
  end
  for _, answer in ipairs(waiting) do
    answer(err)
  end
end

--- The running client, or nil.
function M.client()
  if client_id then
    local client = vim.lsp.get_client_by_id(client_id)
    if client and not client_is_stopped(client) then
      return client
    end
    client_id = nil
  end
  return nil
end

--- Start (or reuse) the client for the configured root. Returns the client
--- id, or nil and an error message.
function M.start()
  if M.client() then
    return client_id
  end
  local binary, err = M.locate(M.options.binary)
  if not binary then
    return nil, err
  end
  local root = root_dir()
  local cmd = { binary, "serve" }
  if M.options.shared then
    vim.list_extend(cmd, { "--shared", "--workspace", root })
    if M.options.idle_timeout then
      vim.list_extend(cmd, { "--idle-timeout", tostring(M.options.idle_timeout) })
    end
  end
  keep_stderr()
  stderr_of[binary] = ""
  local init_options = M.options.config
  if type(init_options) == "table" and next(init_options) == nil then
    -- An empty Lua table is encoded as `[]`; the server takes that as "no
    -- overrides" too, but an older toolwire refuses it.
    init_options = vim.empty_dict()
  end
  local config = {
    name = "toolwire",
    cmd = cmd,
    cmd_cwd = root,
    root_dir = root,
    init_options = init_options,
    -- No buffer-bound work: toolwire's methods are called through request().
    handlers = {
      ["$/progress"] = function(_, params)
        if M.on_progress and params then
          M.on_progress(params.token, params.value)
        end
      end,
    },
    on_init = function(client)
      if clients[client.id] then
        clients[client.id].initialized = true
      end
    end,
    -- A refused `initialize` (a bad configuration) is shown by Neovim
    -- itself, and requests sent meanwhile are answered -32002 with the
    -- server's reason (see request()).
    on_exit = function(code, signal, id)
      local state = clients[id]
      local status = signal ~= 0 and ("signal " .. signal) or ("status " .. tostring(code))
      local message
      if state and not state.initialized then
        local stderr = first_lines(stderr_of[binary], 5)
        message = string.format(
          "%s exited (%s) before initializing%s",
          binary,
          status,
          stderr ~= "" and (":\n" .. stderr) or " (it wrote nothing on stderr)"
        )
      else
        message = string.format("%s exited (%s)", binary, status)
      end
      ended(id, { code = -1, message = message })
    end,
  }
  local id
  if vim.lsp.start then
    -- 0.8+: reuses a running "toolwire" client of the same root. 0.11+
    -- can start without attaching the current buffer.
    local ok, started = pcall(vim.lsp.start, config, { attach = false, reuse_client = function(c, conf)
      -- Never one being stopped (a refused `initialize`, stop()).
      return c.name == conf.name and c.config.root_dir == conf.root_dir and not client_is_stopped(c)
    end })
    if not ok then
      return nil, tostring(started)
    end
    id = started
  else
    id = vim.lsp.start_client(config)
  end
  if not id then
    return nil, "could not start " .. table.concat(cmd, " ")
  end
  if not clients[id] then
    local client = vim.lsp.get_client_by_id(id)
    clients[id] = { pending = {}, initialized = client ~= nil and client.initialized == true }
  end
  client_id = id
  return client_id
end

--- Stop the client (LSP shutdown + exit; the daemon keeps serving others).
function M.stop()
  local client = M.client()
  if client then
    if methods then
      client:stop()
    else
      client.stop()
    end
  end
  client_id = nil
end

local cancelled = { code = -32800, message = "request cancelled", data = { kind = "cancelled" } }
local next_waiting = 0

--- Call a toolwire method: `callback(err, result)`, err being the JSON-RPC
--- error ({code, message, data = {kind, ...}}) or a {message} of our own
--- (the process ended: its binary, exit status and first stderr lines).
--- The callback is called exactly once, also after `cancel` (with the
--- server's answer: -32800 `cancelled` when nothing had committed, else the
--- result). Returns the request id, or nil when the call could not be sent
--- (the callback has then been called, or will be once the process's end
--- is known).
function M.request(method, params, callback)
  callback = callback or function() end
  local id, err = M.start()
  if not id then
    callback({ code = -1, message = err })
    return nil
  end
  local state = clients[id]
  local answered, key = false, nil
  local function answer(e, r)
    if not answered then
      answered = true
      if state and key then
        state.pending[key] = nil
      end
      callback(e, r)
    end
  end
  local client = vim.lsp.get_client_by_id(id)
  if not client then
    answer({ code = -1, message = "toolwire is not running (see :ToolwireInfo)" })
    return nil
  end
  -- Sent at once, also while `initialize` is unanswered (toolwire handles
  -- its connection's messages in order; a refused `initialize` makes it
  -- answer -32002 with the refusal's reason).
  local ok, request_id = client.rpc.request(method, params or vim.empty_dict(), function(rpc_err, result)
    if rpc_err and rpc_err.code == -32002 and state and not state.initialized and not state.refused then
      -- `initialize` was refused: this client is of no use. It is stopped
      -- so that the next request (after setup() with a fixed config)
      -- starts a new one; the error says why.
      state.refused = true
      if methods then
        client:stop(true)
      else
        client.stop(true)
      end
    end
    answer(rpc_err, result)
  end, function()
    -- Called on every answer, just before the answer's callback. Neovim
    -- drops a -32800 answer (it calls no callback for it), so if the
    -- callback has not run once this answer is handled, it was that.
    vim.schedule(function()
      answer(vim.deepcopy(cancelled))
    end)
  end)
  next_waiting = next_waiting + 1
  key = ok and request_id or ("unsent-" .. next_waiting)
  if state then
    -- Answered with the process's end if it ends first.
    state.pending[key] = answer
  elseif not ok then
    answer({ code = -1, message = "toolwire is not running (see :ToolwireInfo)" })
  end
  return ok and request_id or nil
end

--- Cancel a request made with `request` (`$/cancelRequest`). Its callback
--- is still called once: with the -32800 `cancelled` error when the server
--- stopped before committing anything, else with the result (the work had
--- already committed when the cancellation arrived).
function M.cancel(request_id)
  local client = M.client()
  if client and request_id then
    client.rpc.notify("$/cancelRequest", { id = request_id })
  end
end

--- The same as `request`, but waits (at most `timeout_ms`, default 60 s):
--- returns result, err.
function M.request_sync(method, params, timeout_ms)
  local done, res, rerr = false, nil, nil
  M.request(method, params, function(err, result)
    done, res, rerr = true, result, err
  end)
  if not vim.wait(timeout_ms or 60000, function()
    return done
  end, 10) then
    return nil, { code = -1, message = method .. ": no answer in time" }
  end
  return res, rerr
end

local function describe(err)
  if type(err) ~= "table" then
    return tostring(err)
  end
  local kind = err.data and err.data.kind
  if err.code == -32601 then
    return string.format("this toolwire does not know %s (update toolwire)", (err.data and err.data.method) or "the method")
  end
  return string.format("%s%s", err.message or vim.inspect(err), kind and (" [" .. kind .. "]") or "")
end
M.describe_error = describe

function M.setup(opts)
  M.options = vim.tbl_deep_extend("force", vim.deepcopy(defaults), opts or {})
  require("toolwire.commands").register(M)
  if M.options.autostart then
    local id, err = M.start()
    if not id then
      notify(err, vim.log.levels.ERROR)
    end
  end
  return M
end

return M
