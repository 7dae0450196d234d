// The core (the wire codec and the pure machines) is part of SkyNet's API: `import SkyNet` is enough.
@_exported public import SkyNetCore
