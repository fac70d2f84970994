/** The absolute path of the toolwire binary for this machine; throws saying what is missing. */
export declare function binaryPath(): string;
/** The name of the npm package carrying the binary for this machine, or undefined when there is none. */
export declare function platformPackage(): string | undefined;
