// containerd on the host: where it is (its service's command line, else the documented install
// folder, else PATH), its version, its config's CRI runtime tables (never the whole config: it may
// hold registry credentials), hcsshim's containerd-shim-runhcs-v1.exe beside it and whether
// device-util.exe sits beside the shim, where hcsshim looks for it.
// clang-format off
#include <windows.h>
#include <shellapi.h>
// clang-format on

#include <string>
#include <vector>

#include "inventory/windows/hyperv_discover.h"
#include "inventory/windows/native_hyperv.h"
#include "inventory/windows/native_win32.h"

namespace tessera::windows::native {
namespace {

constexpr DWORD kVersionTimeoutMs = 5000;
constexpr DWORD kMaxOutput = 4096;
constexpr LONGLONG kMaxConfigBytes = 1 << 20;

bool IsFile(const std::wstring& path) {
  DWORD attributes = GetFileAttributesW(path.c_str());
  return attributes != INVALID_FILE_ATTRIBUTES && (attributes & FILE_ATTRIBUTE_DIRECTORY) == 0;
}

std::wstring Folder(const std::wstring& path) {
  size_t slash = path.find_last_of(L"\\/");
  return slash == std::wstring::npos ? L"." : path.substr(0, slash);
}

std::wstring ProgramFiles() {
  wchar_t buffer[MAX_PATH];
  DWORD n = GetEnvironmentVariableW(L"ProgramFiles", buffer, MAX_PATH);
  return n > 0 && n < MAX_PATH ? std::wstring(buffer, n) : L"C:\\Program Files";
}

std::wstring OnPath(const wchar_t* file) {
  wchar_t buffer[MAX_PATH];
  DWORD n = SearchPathW(nullptr, file, nullptr, MAX_PATH, buffer, nullptr);
  return n > 0 && n < MAX_PATH ? std::wstring(buffer, n) : L"";
}

// The containerd service's command line split into arguments; empty when there is no service.
std::vector<std::string> ServiceCommandLine() {
  std::vector<std::string> argv;
  SC_HANDLE scm = OpenSCManagerW(nullptr, nullptr, SC_MANAGER_CONNECT);
  if (scm == nullptr) return argv;
  SC_HANDLE service = OpenServiceW(scm, L"containerd", SERVICE_QUERY_CONFIG);
  if (service != nullptr) {
    DWORD needed = 0;
    QueryServiceConfigW(service, nullptr, 0, &needed);
    std::vector<BYTE> buffer(needed);
    auto* config = reinterpret_cast<QUERY_SERVICE_CONFIGW*>(buffer.data());
    if (needed > 0 && QueryServiceConfigW(service, config, needed, &needed) &&
        config->lpBinaryPathName != nullptr) {
      int count = 0;
      wchar_t** args = CommandLineToArgvW(config->lpBinaryPathName, &count);
      for (int i = 0; args != nullptr && i < count; ++i)
        argv.push_back(Narrow(args[i]));
      if (args != nullptr) LocalFree(args);
    }
    CloseServiceHandle(service);
  }
  CloseServiceHandle(scm);
  return argv;
}

// `program --version`'s output (stdout and stderr), at most kMaxOutput bytes; the program is
// killed after kVersionTimeoutMs.
std::string RunVersion(const std::wstring& program, std::vector<std::string>& warnings) {
  SECURITY_ATTRIBUTES inherit{sizeof(inherit), nullptr, TRUE};
  HANDLE read = nullptr;
  HANDLE write = nullptr;
  if (!CreatePipe(&read, &write, &inherit, 0)) return "";
  SetHandleInformation(read, HANDLE_FLAG_INHERIT, 0);
  STARTUPINFOW startup{};
  startup.cb = sizeof(startup);
  startup.dwFlags = STARTF_USESTDHANDLES;
  startup.hStdOutput = write;
  startup.hStdError = write;
  startup.hStdInput = nullptr;
  PROCESS_INFORMATION process{};
  std::wstring command = L"\"" + program + L"\" --version";
  bool started = CreateProcessW(program.c_str(), command.data(), nullptr, nullptr, TRUE,
                                CREATE_NO_WINDOW, nullptr, nullptr, &startup, &process);
  CloseHandle(write);
  std::string output;
  if (!started) {
    warnings.push_back("cannot run " + Narrow(program.c_str()) + " --version: error " +
                       std::to_string(GetLastError()));
  } else {
    if (WaitForSingleObject(process.hProcess, kVersionTimeoutMs) == WAIT_TIMEOUT) {
      TerminateProcess(process.hProcess, 1);
      warnings.push_back(Narrow(program.c_str()) + " --version did not answer in 5 s");
    }
    char buffer[512];
    DWORD got = 0;
    while (output.size() < kMaxOutput && ReadFile(read, buffer, sizeof(buffer), &got, nullptr) &&
           got > 0) {
      output.append(buffer, got);
    }
    CloseHandle(process.hThread);
    CloseHandle(process.hProcess);
  }
  CloseHandle(read);
  return output.substr(0, kMaxOutput);
}

// Reads the config (bounded) and records its runtime tables.
void ReadConfig(ContainerdHost& host, std::vector<std::string>& warnings) {
  std::wstring path = Wide(host.config_path);
  HANDLE file = CreateFileW(path.c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE, nullptr,
                            OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
  if (file == INVALID_HANDLE_VALUE) {
    DWORD error = GetLastError();
    host.config_state = error == ERROR_FILE_NOT_FOUND || error == ERROR_PATH_NOT_FOUND
                            ? ConfigState::kAbsent
                            : ConfigState::kUnreadable;
    return;
  }
  LARGE_INTEGER size{};
  std::string text;
  if (GetFileSizeEx(file, &size) && size.QuadPart <= kMaxConfigBytes) {
    text.resize(static_cast<size_t>(size.QuadPart));
    DWORD got = 0;
    if (!text.empty() &&
        (!ReadFile(file, text.data(), static_cast<DWORD>(text.size()), &got, nullptr) ||
         got != text.size())) {
      host.config_state = ConfigState::kUnreadable;
    }
  } else {
    host.config_state = ConfigState::kUnreadable;
    warnings.push_back(host.config_path + ": larger than 1 MiB, not read");
  }
  CloseHandle(file);
  if (host.config_state == ConfigState::kUnreadable) return;
  auto runtimes = ContainerdRuntimesFromConfig(text);
  if (!runtimes.ok()) {
    host.config_state = ConfigState::kInvalid;
    warnings.push_back(host.config_path + ": " + runtimes.error().message);
    return;
  }
  host.config_state = ConfigState::kRead;
  host.runtimes = std::move(*runtimes);
}

}  // namespace

std::optional<ContainerdHost> DiscoverContainerd(std::vector<std::string>& warnings) {
  std::vector<std::string> argv = ServiceCommandLine();
  std::wstring binary = argv.empty() ? L"" : Wide(argv[0]);
  if (binary.empty() || !IsFile(binary)) {
    std::wstring installed = ProgramFiles() + L"\\containerd\\bin\\containerd.exe";
    binary = IsFile(installed) ? installed : OnPath(L"containerd.exe");
  }
  if (binary.empty()) return std::nullopt;
  ContainerdHost host;
  host.binary = Narrow(binary.c_str());
  host.version = VersionFromOutput(RunVersion(binary, warnings));
  // containerd's default config on Windows: %ProgramFiles%\containerd\config.toml.
  std::string flag = ConfigFlag(argv);
  host.config_path =
      flag.empty() ? Narrow((ProgramFiles() + L"\\containerd\\config.toml").c_str()) : flag;
  ReadConfig(host, warnings);
  // containerd looks for shims beside its own binary, then on PATH.
  std::wstring shim = Folder(binary) + L"\\containerd-shim-runhcs-v1.exe";
  if (!IsFile(shim)) shim = OnPath(L"containerd-shim-runhcs-v1.exe");
  if (!shim.empty()) {
    host.shim_path = Narrow(shim.c_str());
    host.hcsshim_version = VersionFromOutput(RunVersion(shim, warnings));
    // hcsshim takes device-util.exe from the folder of the shim's own executable.
    host.device_util_beside_shim = IsFile(Folder(shim) + L"\\device-util.exe");
  }
  return host;
}

}  // namespace tessera::windows::native
