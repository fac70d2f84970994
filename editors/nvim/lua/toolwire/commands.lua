-- :ToolwireCheck, :ToolwireRepair, :ToolwireShow and :ToolwireInfo.
local C = {}

local function notify(msg, level)
  vim.notify("toolwire: " .. msg, level or vim.log.levels.INFO)
end

local function current_file(arg)
  local path = (arg and arg ~= "") and arg or vim.api.nvim_buf_get_name(0)
  if path == "" then
    return nil
  end
  return vim.fn.fnamemodify(path, ":p")
end

local function decode(line)
  local ok, value = pcall(vim.json.decode, line)
  if ok and type(value) == "table" then
    return value
  end
  return nil
end

--- The 1-based line of each message of a transcript file: violations name
--- messages by index (counting messages only, as providers do).
function C.message_lines(path)
  local lines = {}
  local ok, content = pcall(vim.fn.readfile, path)
  if not ok then
    return lines
  end
  for lnum, text in ipairs(content) do
    local v = decode(text)
    if v and (v.type == "message" or (v.type == nil and v.role ~= nil)) then
      table.insert(lines, lnum)
    end
  end
  return lines
end

--- transcript/check of a file; the violations go to the quickfix list.
function C.check(tw, path, done)
  tw.request("transcript/check", { path = path }, function(err, result)
    if err then
      notify("check failed: " .. tw.describe_error(err), vim.log.levels.ERROR)
      if done then done(nil, err) end
      return
    end
    C.last_check = result
    local at = C.message_lines(path)
    local items = {}
    for _, v in ipairs(result.violations or {}) do
      table.insert(items, {
        filename = path,
        lnum = at[v.index + 1] or 1,
        text = string.format("%s %s: %s", v.kind, table.concat(v.ids or {}, ","), v.providerError or ""),
        type = "E",
      })
    end
    vim.fn.setqflist({}, "r", { title = "toolwire check " .. path, items = items })
    if result.ok then
      notify(path .. ": the provider would accept it (no pairing fault)")
    else
      notify(string.format("%s: %d pairing fault(s), see the quickfix list", path, #items), vim.log.levels.WARN)
      vim.cmd("copen")
      vim.cmd("wincmd p") -- stay on the transcript
    end
    if done then done(result) end
  end)
end

--- Repair a copy of the transcript in a temporary directory and show the
--- difference with the original (nothing of the original is touched).
--- Returns the path of the repaired copy, or nil and an error.
function C.preview(tw, path)
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  local copy = dir .. "/" .. vim.fn.fnamemodify(path, ":t")
  local ok = pcall(vim.fn.writefile, vim.fn.readfile(path, "b"), copy, "b")
  if not ok then
    return nil, "could not copy " .. path
  end
  local result, err = tw.request_sync("transcript/repair", { path = copy })
  if err then
    vim.fn.delete(dir, "rf")
    return nil, tw.describe_error(err)
  end
  return copy, nil, result, dir
end

function C.repair(tw, path, force)
  if not force then
    local copy, err, result, dir = C.preview(tw, path)
    if not copy then
      notify("repair preview failed: " .. err, vim.log.levels.ERROR)
      return
    end
    if vim.fn.filereadable(copy .. ".bak") == 0 then
      vim.fn.delete(dir, "rf")
      notify(path .. " is valid: nothing to repair")
      return
    end
    -- Side by side: the original and what repair would write.
    vim.cmd("tabnew " .. vim.fn.fnameescape(path))
    vim.cmd("diffthis")
    vim.cmd("vertical new")
    vim.api.nvim_buf_set_lines(0, 0, -1, false, vim.fn.readfile(copy))
    vim.bo.buftype, vim.bo.bufhidden, vim.bo.modifiable = "nofile", "wipe", false
    vim.api.nvim_buf_set_name(0, "toolwire://repaired/" .. vim.fn.fnamemodify(path, ":t"))
    vim.cmd("diffthis")
    vim.cmd("redraw")
    vim.fn.delete(dir, "rf")
    local summary = string.format(
      "drop %d call(s), %d result(s), %d torn line(s); keep %d line(s)",
      #(result.droppedToolUses or {}), #(result.droppedToolResults or {}), result.tornLines or 0, result.kept or 0)
    if vim.fn.confirm("Repair " .. path .. ": " .. summary .. "?\n(the original is kept as .bak)", "&Yes\n&No", 2) ~= 1 then
      vim.cmd("tabclose")
      notify("repair cancelled")
      return
    end
    vim.cmd("tabclose")
  end
  local result, err = tw.request_sync("transcript/repair", { path = path })
  if err then
    notify("repair failed: " .. tw.describe_error(err), vim.log.levels.ERROR)
    return
  end
  C.last_repair = result
  -- Buffers showing the file get the new content.
  vim.cmd("checktime")
  notify(string.format("repaired %s: dropped %d call(s), %d result(s), %d torn line(s)", path,
    #(result.droppedToolUses or {}), #(result.droppedToolResults or {}), result.tornLines or 0))
end

--- Session and tool_use id of the saved output whose path is on `line`
--- ("... Full output saved to: <dataDir>/sessions/<sid>/tool-results/<id>.txt").
function C.parse_saved_path(line)
  local sid, name = line:match("/sessions/([%w._-]+)/tool%-results/([%w_-]+)%.%a+")
  return sid, name
end

function C.show(tw, session_id, tool_use_id, done)
  tw.request("artifact/read", { sessionId = session_id, toolUseId = tool_use_id, limit = 100000 }, function(err, result)
    if err then
      notify("show failed: " .. tw.describe_error(err), vim.log.levels.ERROR)
      if done then done(nil, err) end
      return
    end
    local name = string.format("toolwire://%s/%s", session_id, tool_use_id)
    local existing = vim.fn.bufnr(name)
    if existing ~= -1 then
      vim.api.nvim_buf_delete(existing, { force = true })
    end
    vim.cmd("new")
    local lines = vim.split(result.text, "\n", { plain = true })
    if lines[#lines] == "" then
      table.remove(lines)
    end
    if result.truncated then
      table.insert(lines, string.format("[... toolwire: lines %d-%d of %d shown]", result.startLine + 1, result.endLine, result.totalLines))
    end
    vim.api.nvim_buf_set_lines(0, 0, -1, false, lines)
    vim.bo.buftype, vim.bo.bufhidden, vim.bo.swapfile, vim.bo.modifiable = "nofile", "wipe", false, false
    vim.api.nvim_buf_set_name(0, name)
    if done then done(result) end
  end)
end

function C.register(tw)
  vim.api.nvim_create_user_command("ToolwireCheck", function(o)
    local path = current_file(o.args)
    if not path then
      return notify("no file: give a transcript path", vim.log.levels.ERROR)
    end
    C.check(tw, path)
  end, { nargs = "?", complete = "file", desc = "toolwire: would the provider accept this transcript?" })

  vim.api.nvim_create_user_command("ToolwireRepair", function(o)
    local path = current_file(o.args)
    if not path then
      return notify("no file: give a transcript path", vim.log.levels.ERROR)
    end
    C.repair(tw, path, o.bang)
  end, { nargs = "?", bang = true, complete = "file", desc = "toolwire: repair a transcript (diff preview first; ! writes at once)" })

  vim.api.nvim_create_user_command("ToolwireShow", function(o)
    local sid, id = unpack(o.fargs)
    if not id then
      sid, id = C.parse_saved_path(vim.api.nvim_get_current_line())
    end
    if not (sid and id) then
      return notify("usage: :ToolwireShow SESSION_ID TOOL_USE_ID (or run it on a line naming a saved output)", vim.log.levels.ERROR)
    end
    C.show(tw, sid, id)
  end, { nargs = "*", desc = "toolwire: open a saved tool output" })

  vim.api.nvim_create_user_command("ToolwireInfo", function()
    local client = tw.client()
    local binary, err = tw.locate(tw.options.binary)
    local info = client and client.server_capabilities and client.server_capabilities.experimental
    notify(string.format("binary: %s\nroot: %s\nclient: %s\nmethods: %s", binary or err,
      tw.options.root or vim.fn.getcwd(), client and ("running (id " .. client.id .. ")") or "not running",
      info and info.toolwire and table.concat(info.toolwire.methods, ", ") or "-"))
  end, { desc = "toolwire: binary, root and server" })
end

return C
