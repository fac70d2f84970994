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
  local stat = vim.loop.fs_stat(path)
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

--- The running client, or nil.
function M.client()
  if client_id then
    local client = vim.lsp.get_client_by_id(client_id)
    if client and not client.is_stopped() then
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
  local config = {
    name = "toolwire",
    cmd = cmd,
    cmd_cwd = root,
    root_dir = root,
    init_options = M.options.config,
    -- No buffer-bound work: toolwire's methods are called through request().
    handlers = {
      ["$/progress"] = function(_, params)
        if M.on_progress and params then
          M.on_progress(params.token, params.value)
        end
      end,
    },
  }
  if vim.lsp.start then
    -- 0.8+: reuses a running "toolwire" client of the same root. 0.11+
    -- can start without attaching the current buffer.
    local ok, id = pcall(vim.lsp.start, config, { attach = false, reuse_client = function(c, conf)
      return c.name == conf.name and c.config.root_dir == conf.root_dir
    end })
    if not ok then
      return nil, tostring(id)
    end
    client_id = id
  else
    client_id = vim.lsp.start_client(config)
  end
  if not client_id then
    return nil, "could not start " .. table.concat(cmd, " ")
  end
  return client_id
end

--- Stop the client (LSP shutdown + exit; the daemon keeps serving others).
function M.stop()
  local client = M.client()
  if client then
    client.stop()
  end
  client_id = nil
end

--- Call a toolwire method: `callback(err, result)`, err being the JSON-RPC
--- error ({code, message, data = {kind, ...}}) or a {message} of our own.
--- Returns the request id, or nil when the call could not be sent.
function M.request(method, params, callback)
  callback = callback or function() end
  local id, err = M.start()
  if not id then
    callback({ code = -1, message = err })
    return nil
  end
  local client = vim.lsp.get_client_by_id(id)
  local ok, request_id = client.request(method, params or vim.empty_dict(), function(rpc_err, result)
    callback(rpc_err, result)
  end)
  if not ok then
    callback({ code = -1, message = "toolwire is not running (see :ToolwireInfo)" })
    return nil
  end
  return request_id
end

--- Cancel a request made with `request` ($/cancelRequest).
function M.cancel(request_id)
  local client = M.client()
  if client and request_id then
    client.cancel_request(request_id)
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
