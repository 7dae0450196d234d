import Foundation
import SkyNetFuzzing

// libFuzzer calls this with each input (`make fuzz`: built with -sanitize=fuzzer,address).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    BrokerFuzzer.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

#if FUZZING
/// libFuzzer's driver (in its runtime, linked by -sanitize=fuzzer): SwiftPM gives an executable
/// target a main of its own, so this main hands the command line to libFuzzer.
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

@main
struct FuzzDriver {
    static func main() {
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(runFuzzerDriver(&argc, &argv, fuzzOne))
    }
}
#else
/// Without libFuzzer (a plain build, and the tests): replays the given files or directories, so
/// the seed corpus and every input a fuzzing run found are regression tests.
@main
struct FuzzReplay {
    static func main() throws {
        let arguments = CommandLine.arguments
        if arguments.count == 3, arguments[1] == "--seeds" {
            for (name, bytes) in BrokerFuzzer.seeds() {
                try Data(bytes).write(to: URL(fileURLWithPath: arguments[2]).appendingPathComponent(name))
            }
            return
        }
        var files: [String] = []
        for argument in CommandLine.arguments.dropFirst() {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: argument, isDirectory: &isDirectory) else {
                FileHandle.standardError.write(Data("skynet-fuzz: \(argument) does not exist\n".utf8))
                exit(2)
            }
            if isDirectory.boolValue {
                let names = try FileManager.default.contentsOfDirectory(atPath: argument).sorted()
                files += names.map { argument + "/" + $0 }
            } else {
                files.append(argument)
            }
        }
        for file in files {
            let data = try Data(contentsOf: URL(fileURLWithPath: file))
            data.withUnsafeBytes { BrokerFuzzer.run($0) }
        }
        print("replayed \(files.count) inputs")
    }
}
#endif
